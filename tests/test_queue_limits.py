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
                conn.execute("select public.submit_document(%s, %s)", (uri, " ".join([text] * times)))
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
    (batches of 64) finishes SMALL's document before any of BIG's. Prints the delays."""
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
        while not ready(db, SMALL):
            assert proc.poll() is None and time.monotonic() - submitted < 240
            time.sleep(0.05)
        small_delay = time.monotonic() - submitted
        while ready(db, BIG) < 200:
            assert proc.poll() is None and time.monotonic() - submitted < 600
            time.sleep(0.2)
        big_delay = time.monotonic() - submitted
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    with connect(db) as conn:
        small_at, big_first = conn.execute(
            "select max(updated_at) filter (where tenant_id = %s), "
            "min(updated_at) filter (where tenant_id = %s) from pgrag.documents",
            (SMALL, BIG),
        ).fetchone() or (None, None)
    print(json.dumps({"small_ready_s": round(small_delay, 2), "big_ready_s": round(big_delay, 2)}))
    assert small_at < big_first


def ready(db: str, tenant: str) -> int:
    with connect(db) as conn:
        row = conn.execute(
            "select count(*) from pgrag.documents where tenant_id = %s and status = 'ready'",
            (tenant,),
        ).fetchone()
    return int(row[0]) if row else 0
