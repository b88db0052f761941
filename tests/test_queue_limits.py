"""The document queue's limits, whatever the client: fairness between tenants, publishing through
the queue, the storage a failed document keeps, the per-tenant queue limit under concurrency, and
direct SQL writes as a tenant (the PostgREST replay of plugins.tenancy).

A real ``pgrag worker`` process runs where the flow needs one (fairness), the worker's code in a
thread where it only has to drain the queue (``plugins.queue.drain``).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from typing import Any

import psycopg
import pytest
from plugins.queue import cli_env, drain, pgrag_command, short_documents
from plugins.tenancy import claims_for, request

from pgrag.db import connect, set_request_tenant

# Tenant names in the order a claim that favoured the first key would serve them.
BIG, SMALL = "acme", "globex"


def submit(db: str, tenant: str, uri: str, content: str | None = "Some text.", **more: Any) -> Any:
    """``public.submit_document`` as the tenant's signed-in user: (document_id, version, status)."""
    args = {"source_uri": uri, "content": content, **more}
    named = ", ".join(f"{k} => %({k})s" for k in args)
    with request(db, "authenticated", claims_for(tenant)) as conn:
        return conn.execute(f"select * from public.submit_document({named})", args).fetchone()


def claim(conn: psycopg.Connection[Any], n: int, worker: str = "w1") -> list[tuple[str, int]]:
    """``pgrag.claim_documents`` as the owner: (tenant_id, document_id) in the order returned."""
    return conn.execute(
        "select tenant_id, document_id from pgrag.claim_documents(%s, %s, '1 minute')",
        (worker, n),
    ).fetchall()


def submit_both(db: str, big: int, repeat: int = 1) -> None:
    """``big`` documents of BIG (each a short text ``repeat`` times), then one short document of
    SMALL, in one transaction (the worker's own role acting as each tenant): both are queued
    before any claim."""
    with connect(db) as conn:
        for tenant, count, times in ((BIG, big, repeat), (SMALL, 1, 1)):
            set_request_tenant(conn, tenant)
            for uri, text in short_documents(count, tenant):
                conn.execute(
                    "select public.submit_document(%s, %s)", (uri, " ".join([text] * times))
                )
        conn.commit()


@pytest.fixture
def owner(db: str, authenticator: str) -> Any:
    """The owner's connection (the worker's role), autocommit."""
    with connect(db, autocommit=True) as conn:
        yield conn


# -- fairness ------------------------------------------------------------------------------------


def test_a_small_tenant_is_claimed_in_the_first_claim_and_comes_first(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    submit_both(db, 200)

    first = claim(owner, 64)

    assert len(first) == 64 and [t for t, _ in first].count(SMALL) == 1
    assert first[0][0] == SMALL  # the worker runs the batch's tenants in this order


def test_one_document_claims_take_turns_between_tenants(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    submit_both(db, 200)

    tenants = [claim(owner, 1, f"w{i}")[0][0] for i in range(4)]

    assert tenants == [BIG, SMALL, BIG, BIG]


def test_claims_go_round_the_tenants_from_the_one_served_last_wrapping_around(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    tenants = ["t-a", "t-b", "t-c", "t-d"]
    for tenant in tenants:
        for i in range(3):
            submit(db, tenant, f"doc-{i}")

    served = [sorted({t for t, _ in claim(owner, n, f"w{n}")}) for n in (2, 3, 4)]
    after = [t for t, _ in claim(owner, 1, "w9")]

    assert served == [["t-a", "t-b"], ["t-a", "t-c", "t-d"], tenants]
    assert after == ["t-b"]  # the claim of four ended its turn with t-a


def test_a_tenants_share_of_a_claim_is_bounded_by_bytes_but_never_empty(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    owner.execute("update pgrag.queue_settings set claim_bytes_per_tenant = 250000")
    with connect(db) as conn:
        set_request_tenant(conn, BIG)
        for i in range(5):
            conn.execute("select public.submit_document(%s, %s)", (f"heavy-{i}", "x" * 200_000))
        conn.commit()

    assert [d for _, d in claim(owner, 64, "w1")] and len(claim(owner, 64, "w2")) == 1
    assert owner.execute(
        "select count(*) from pgrag.document_queue where state = 'processing'"
    ).fetchone() == (2,)


def test_a_real_worker_serves_a_small_tenant_before_a_big_tenants_batch(db: str) -> None:
    """BIG queues 200 documents (a few chunks each), then SMALL one; a running ``pgrag worker``
    (batches of 64) finishes SMALL's document before any of BIG's. Prints both delays."""
    proc = subprocess.Popen(
        [pgrag_command(), "worker", "--poll", "1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(db),
    )
    try:
        with connect(db) as conn:  # warm up: the model is loaded once this one is ready
            set_request_tenant(conn, "warm")
            conn.execute("select public.submit_document('warm', 'Warming up the worker.')")
            conn.commit()
        deadline = time.monotonic() + 240
        while not ready(db, "warm"):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        submit_both(db, 200, repeat=20)
        submitted = time.monotonic()
        while not (counts := ready_counts(db))[SMALL]:
            assert proc.poll() is None and time.monotonic() - submitted < 240
            time.sleep(0.05)
        small_delay = time.monotonic() - submitted
        while not ready_counts(db)[BIG]:
            assert proc.poll() is None and time.monotonic() - submitted < 600
            time.sleep(0.05)
        big_delay = time.monotonic() - submitted
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    print(
        json.dumps(
            {"small_ready_s": round(small_delay, 2), "big_first_ready_s": round(big_delay, 2)}
        )
    )
    assert counts[BIG] == 0  # none of BIG's was ready when SMALL's was


def ready_counts(db: str) -> dict[str, int]:
    """Ready documents of BIG and SMALL, read together."""
    with connect(db) as conn:
        rows = conn.execute(
            "select tenant_id, count(*) from pgrag.documents "
            "where tenant_id = any(%s) and status = 'ready' group by 1",
            ([BIG, SMALL],),
        ).fetchall()
    return {BIG: 0, SMALL: 0} | {str(t): int(c) for t, c in rows}


def ready(db: str, tenant: str) -> int:
    with connect(db) as conn:
        row = conn.execute(
            "select count(*) from pgrag.documents where tenant_id = %s and status = 'ready'",
            (tenant,),
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_claim_of_ten_reads_a_bounded_part_of_a_large_queue(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    """20,000 documents queued by one tenant beside 300 small tenants: a claim of ten reads a
    few hundred rows and index entries of the queue and the documents, not the queue."""
    owner.execute("set session_replication_role = replica")  # bulk setup: no triggers
    owner.execute(
        "with t as (select 'whale' as tenant_id, g from generate_series(1, 20000) g "
        "union all select 'small-' || lpad(s::text, 3, '0'), g "
        "from generate_series(1, 300) s, generate_series(1, 2) g), "
        "d as (insert into pgrag.documents (tenant_id, title, source_type, source_uri, status) "
        "select tenant_id, '', 'text', 'doc-' || g, 'pending' from t returning tenant_id, id) "
        "insert into pgrag.document_queue (tenant_id, document_id, source_type, content, "
        "next_attempt_at) select tenant_id, id, 'text', 'Some text.', "
        "now() - interval '1 hour' + id * interval '1 ms' from d"
    )
    owner.execute("reset session_replication_role")
    owner.execute("analyze pgrag.document_queue, pgrag.documents")
    with owner.transaction():
        claim(owner, 10, "w0")  # plans made; the rotation moves on
    with owner.transaction():
        got = claim(owner, 10, "w1")
        read = owner.execute(
            "select sum(pg_stat_get_xact_tuples_returned(c.oid) "
            "+ pg_stat_get_xact_tuples_fetched(c.oid)) from pg_class c "
            "where c.oid in ('pgrag.document_queue'::regclass, 'pgrag.documents'::regclass) "
            "or c.oid in (select indexrelid from pg_index where indrelid in "
            "('pgrag.document_queue'::regclass, 'pgrag.documents'::regclass))"
        ).fetchone()
    assert len(got) == 10 and len({t for t, _ in got}) == 10
    print(json.dumps({"claim_of_ten_rows_read": int(read[0]) if read else None}))
    assert read and int(read[0]) < 1000


# -- publishing through the queue ----------------------------------------------------------------


def anon_reads(db: str) -> list[str]:
    """Chunk texts anon can read."""
    with request(db, "anon") as conn:
        return [r[0] for r in conn.execute("select content from pgrag.chunks order by content")]


def publish(db: str, uri: str) -> None:
    """The operator publishes ``uri`` (the owner's UPDATE of is_public)."""
    with connect(db) as conn:
        conn.execute("update pgrag.documents set is_public = true where source_uri = %s", (uri,))
        conn.commit()


def test_a_version_submitted_before_publishing_is_not_public_once_the_worker_completes_it(
    db: str, local_embedder: Any, authenticator: str
) -> None:
    submit(db, BIG, "policy.md", "Version one, reviewed: the harbour closes at dusk.")
    drain(db, local_embedder)
    submit(db, BIG, "policy.md", "Version two, unreviewed: the vault code is 4242.")  # v1 ready
    publish(db, "policy.md")  # the operator reviewed version one
    assert anon_reads(db) == ["Version one, reviewed: the harbour closes at dusk."]

    drain(db, local_embedder)  # the worker completes version two with its own privileges

    assert anon_reads(db) == []
    with connect(db) as conn:
        assert conn.execute(
            "select d.status, d.is_public, c.content from pgrag.documents d "
            "join pgrag.chunks c on c.document_id = d.id where d.source_uri = 'policy.md'"
        ).fetchall() == [("ready", False, "Version two, unreviewed: the vault code is 4242.")]
    publish(db, "policy.md")  # published again: now it was reviewed
    assert anon_reads(db) == ["Version two, unreviewed: the vault code is 4242."]


def test_new_metadata_submitted_before_publishing_is_not_public_once_completed(
    db: str, local_embedder: Any, authenticator: str
) -> None:
    text = "Reviewed: the harbour closes at dusk."
    submit(db, BIG, "policy.md", text, metadata='{"owner": "ops"}')
    drain(db, local_embedder)
    submit(db, BIG, "policy.md", text, metadata='{"owner": "unreviewed"}')  # same text
    publish(db, "policy.md")

    summary = drain(db, local_embedder)

    assert summary.documents_unchanged == 1  # nothing embedded: skip_documents
    with request(db, "anon") as conn:
        assert conn.execute("select metadata from pgrag.documents").fetchall() == []


def test_a_version_submitted_with_the_publishing_privilege_stays_public(
    db: str, local_embedder: Any, authenticator: str
) -> None:
    submit(db, BIG, "policy.md", "Version one: the harbour closes at dusk.")
    drain(db, local_embedder)
    publish(db, "policy.md")
    with request(db, "service_role", claims_for(BIG) | {"role": "service_role"}) as conn:
        conn.execute(
            "select public.submit_document('policy.md', 'Version two: the harbour closes at ten.')"
        )

    drain(db, local_embedder)

    assert anon_reads(db) == ["Version two: the harbour closes at ten."]


def test_a_direct_queue_row_for_a_published_document_does_not_publish_its_text(
    db: str, local_embedder: Any, authenticator: str
) -> None:
    doc = submit(db, BIG, "policy.md", "Reviewed: the harbour closes at dusk.")[0]
    drain(db, local_embedder)
    publish(db, "policy.md")
    with request(db, "authenticated", claims_for(BIG)) as conn:  # not through submit_document
        conn.execute(
            "insert into pgrag.document_queue (tenant_id, document_id, source_type, content) "
            "values (%s, %s, 'text', 'Unreviewed: the vault code is 4242.')",
            (BIG, doc),
        )

    drain(db, local_embedder)

    assert anon_reads(db) == []


# -- what a failed document keeps ----------------------------------------------------------------


def test_a_document_that_fails_for_good_keeps_no_content(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    doc = submit(db, BIG, "a.txt", "x" * 100_000)[0]
    claim(owner, 1)
    with owner.transaction():
        set_request_tenant(owner, BIG)
        owner.execute(
            "select pgrag.fail_attempts('w1', array[%s]::int8[], array[1], array['boom'], "
            "array[false])",
            (doc,),
        )

    assert owner.execute(
        "select state, content, last_error from pgrag.document_queue"
    ).fetchall() == [("failed", None, "boom")]
    assert submit(db, BIG, "a.txt", "fixed text")[1] == 2  # a resubmission brings content again
    assert owner.execute("select state, content from pgrag.document_queue").fetchall() == [
        ("queued", "fixed text")
    ]


def test_a_document_whose_lease_keeps_expiring_keeps_no_content(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    owner.execute("update pgrag.queue_settings set max_attempts = 1")
    submit(db, BIG, "a.txt", "x" * 100_000)
    owner.execute("select * from pgrag.claim_documents('killed', 1, '1 second')")
    time.sleep(1.1)

    assert claim(owner, 1) == []
    assert owner.execute("select state, content from pgrag.document_queue").fetchall() == [
        ("failed", None)
    ]


# -- the per-tenant queue limit under concurrency -------------------------------------------------


def test_concurrent_submissions_never_pass_the_tenants_queue_limit(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    owner.execute("update pgrag.queue_settings set max_queued_per_tenant = 5")
    submit(db, BIG, "first")
    start = threading.Barrier(8)
    outcomes: list[str] = []

    def one(i: int) -> None:
        try:
            with request(db, "authenticated", claims_for(BIG)) as conn:
                start.wait(timeout=30)
                conn.execute("select public.submit_document(%s, 'Some text.')", (f"doc-{i}",))
            outcomes.append("queued")
        except psycopg.Error as exc:
            outcomes.append(f"{exc.sqlstate}: {exc.diag.message_primary}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    refused = (
        "PR010: the queue holds 5 documents of this tenant, its limit: "
        "wait until some are processed"
    )
    assert sorted(outcomes) == sorted(["queued"] * 4 + [refused] * 4)
    assert owner.execute("select count(*) from pgrag.document_queue").fetchone() == (5,)


# -- direct SQL as a tenant ----------------------------------------------------------------------


def direct_document(conn: psycopg.Connection[Any], tenant: str, uri: str) -> int:
    """A document row written directly as the tenant (its column privileges allow it)."""
    row = conn.execute(
        "insert into pgrag.documents (tenant_id, title, source_type, source_uri) "
        "values (%s, '', 'text', %s) returning id",
        (tenant, uri),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_direct_insert_of_oversized_content_is_refused(db: str, authenticator: str) -> None:
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue, match="content must have at most"),
        request(db, "authenticated", claims_for(BIG)) as conn,
    ):
        doc = direct_document(conn, BIG, "big.txt")
        conn.execute(
            "insert into pgrag.document_queue (tenant_id, document_id, source_type, content) "
            "values (%s, %s, 'text', repeat('x', 20 * 1024 * 1024))",
            (BIG, doc),
        )


def test_a_direct_update_to_oversized_content_is_refused(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    owner.execute("update pgrag.queue_settings set max_content_bytes = 1000")
    submit(db, BIG, "a.txt")
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue, match="content must have at most 1000"),
        request(db, "authenticated", claims_for(BIG)) as conn,
    ):
        conn.execute("update pgrag.document_queue set content = repeat('x', 1001)")


@pytest.mark.parametrize(
    ("column", "value", "argument"),
    [("title", "repeat('t', 1001)", "title"), ("metadata", "'[1]'::jsonb", "metadata")],
    ids=["long-title", "metadata-array"],
)
def test_a_direct_write_of_other_columns_out_of_range_is_refused(
    db: str, authenticator: str, column: str, value: str, argument: str
) -> None:
    submit(db, BIG, "a.txt")
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue, match=f"^{argument}"),
        request(db, "authenticated", claims_for(BIG)) as conn,
    ):
        conn.execute(f"update pgrag.document_queue set {column} = {value}")


def test_direct_inserts_count_toward_the_tenants_queue_limit(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    owner.execute("update pgrag.queue_settings set max_queued_per_tenant = 2")
    submit(db, BIG, "a.txt")
    submit(db, BIG, "b.txt")
    with request(db, "authenticated", claims_for(BIG)) as conn:
        doc = direct_document(conn, BIG, "c.txt")
    with (
        pytest.raises(psycopg.Error) as raised,
        request(db, "authenticated", claims_for(BIG)) as conn,
    ):
        conn.execute(
            "insert into pgrag.document_queue (tenant_id, document_id, source_type, content) "
            "values (%s, %s, 'text', 'more')",
            (BIG, doc),
        )
    assert raised.value.sqlstate == "PR010"


def test_a_direct_update_requeueing_a_failed_document_counts_toward_the_limit(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    failed = submit(db, BIG, "failed.txt")[0]
    claim(owner, 1)
    with owner.transaction():
        set_request_tenant(owner, BIG)
        owner.execute(
            "select pgrag.fail_attempts('w1', array[%s]::int8[], array[1], array['boom'], "
            "array[false])",
            (failed,),
        )
    owner.execute("update pgrag.queue_settings set max_queued_per_tenant = 1")
    submit(db, BIG, "waiting.txt")

    with (
        pytest.raises(psycopg.Error) as raised,
        request(db, "authenticated", claims_for(BIG)) as conn,
    ):
        conn.execute(
            "update pgrag.document_queue set content = 'again' where document_id = %s", (failed,)
        )
    assert raised.value.sqlstate == "PR010"
