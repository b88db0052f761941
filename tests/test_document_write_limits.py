"""A tenant's direct writes of ``pgrag.documents``, whatever the client (the PostgREST replay of
plugins.tenancy): the bounds of ``public.submit_document`` hold for them, the loader's and the
worker's bookkeeping (status, error, chunk count, checksum, model, timestamps) is not a
tenant's to write, and the documented flows (submit, a worker completing, delete) still work."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from plugins.queue import drain
from plugins.tenancy import claims_for, request
from psycopg.types.json import Jsonb

from pgrag.db import connect, set_request_tenant
from pgrag.importer.checks import MAX_METADATA_BYTES, metadata_problem
from pgrag.importer.mapping import MAX_URI_CHARS, DimensionTally, documents
from pgrag.importer.sources import Source, SourceRow

TENANT = "acme"


@pytest.fixture
def owner(db: str, authenticator: str) -> Iterator[psycopg.Connection[Any]]:
    """The owner's connection (the worker's role), autocommit."""
    with connect(db, autocommit=True) as conn:
        yield conn


def submit(db: str, uri: str, content: str = "Some text about parking.") -> tuple[int, int, str]:
    """``public.submit_document`` as the tenant's signed-in user: (document_id, version, status)."""
    with request(db, "authenticated", claims_for(TENANT)) as conn:
        row = conn.execute(
            "select * from public.submit_document(%s, %s)", (uri, content)
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), str(row[2])


def status_of(owner: psycopg.Connection[Any], doc: int) -> tuple[str, str | None]:
    row = owner.execute(
        "select status, error from pgrag.documents where id = %s", (doc,)
    ).fetchone()
    assert row is not None
    return str(row[0]), row[1]


def fail_for_good(owner: psycopg.Connection[Any], doc: int) -> None:
    """The worker claims version 1 of ``doc`` and fails it with no retry ('boom')."""
    owner.execute("select pgrag.claim_documents('w1', 1, '1 minute')")
    with owner.transaction():
        set_request_tenant(owner, TENANT)
        owner.execute(
            "select pgrag.fail_attempts('w1', array[%s]::int8[], array[1], array['boom'], "
            "array[false])",
            (doc,),
        )


OVERSIZE_INSERTS = {
    "title": ("repeat('t', 1001)", "'{}'::jsonb", "'a.txt'", "title must have at most 1000"),
    "uri-characters": (
        "''",
        "'{}'::jsonb",
        "repeat('u', 2049)",
        "source_uri must have at most 2048 characters",
    ),
    "uri-bytes": (
        "''",
        "'{}'::jsonb",
        "repeat('é', 1025)",
        "source_uri must have at most 2048 bytes",
    ),
    "uri-blank": ("''", "'{}'::jsonb", "'  '", "source_uri must be a non-blank"),
    "metadata-size": (
        "''",
        "jsonb_build_object('k', repeat('m', 10000))",
        "'a.txt'",
        "metadata must have at most 10000 bytes",
    ),
    "metadata-not-object": ("''", "'[1]'::jsonb", "'a.txt'", "metadata must be a JSON object"),
}


@pytest.mark.parametrize("case", OVERSIZE_INSERTS.values(), ids=OVERSIZE_INSERTS.keys())
def test_a_direct_insert_out_of_bounds_is_refused(
    db: str, owner: psycopg.Connection[Any], case: tuple[str, str, str, str]
) -> None:
    title, metadata, uri, message = case
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue, match=message),
        request(db, "authenticated", claims_for(TENANT)) as conn,
    ):
        conn.execute(
            "insert into pgrag.documents (title, source_type, source_uri, metadata) "
            f"values ({title}, 'text', {uri}, {metadata})"
        )
    assert owner.execute("select count(*) from pgrag.documents").fetchone() == (0,)


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("title = repeat('t', 1001)", "title must have at most 1000"),
        ("source_uri = repeat('u', 2049)", "source_uri must have at most 2048"),
        ("metadata = jsonb_build_object('k', repeat('m', 10000))", "metadata must have at most"),
        ("metadata = '\"text\"'::jsonb", "metadata must be a JSON object"),
    ],
    ids=["title", "uri", "metadata-size", "metadata-not-object"],
)
def test_a_direct_update_out_of_bounds_is_refused(
    db: str, owner: psycopg.Connection[Any], assignment: str, message: str
) -> None:
    doc = submit(db, "a.txt")[0]
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue, match=message),
        request(db, "authenticated", claims_for(TENANT)) as conn,
    ):
        conn.execute(f"update pgrag.documents set {assignment} where id = %s", (doc,))
    row = owner.execute(
        "select title, source_uri, metadata from pgrag.documents where id = %s", (doc,)
    ).fetchone()
    assert row == ("", "a.txt", {})


def test_submit_document_refuses_a_source_uri_over_2048_bytes(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue, match="2048 bytes"),
        request(db, "authenticated", claims_for(TENANT)) as conn,
    ):
        conn.execute("select public.submit_document(repeat('é', 1025), 'Some text.')")
    assert owner.execute("select count(*) from pgrag.documents").fetchone() == (0,)


def importer_refuses_source(uri: str) -> bool:
    """Whether pgrag import's checks refuse a row of source ``uri``."""
    row = SourceRow("1", "text", np.ones(4, np.float32), source=uri)
    source = Source("test", "jsonl", "test", [], {}, [row])
    (doc,) = documents(source, 4, {}, DimensionTally())
    return bool(doc.refused)


def test_pgrag_imports_bounds_on_metadata_and_source_are_a_tenants_writes(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    # pgrag import writes as the owner, whose writes skip the tenant-write checks: its own
    # checks keep what it stores within what a tenant's write may store, and no further.
    at_bound = {"k": "m" * (MAX_METADATA_BYTES - len('{"k": ""}'))}
    past_bound = {"k": at_bound["k"] + "m"}
    assert (metadata_problem(at_bound), metadata_problem(past_bound) is not None) == (None, True)
    assert not importer_refuses_source("u" * MAX_URI_CHARS)
    assert importer_refuses_source("u" * (MAX_URI_CHARS + 1))
    assert importer_refuses_source("é" * (MAX_URI_CHARS // 2 + 1))  # characters within, bytes not

    owner.execute("select pgrag.check_document_fields(null, %s)", (Jsonb(at_bound),))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="metadata must have at most"):
        owner.execute("select pgrag.check_document_fields(null, %s)", (Jsonb(past_bound),))
    insert = "insert into pgrag.documents (source_type, source_uri) values ('text', %s)"
    with request(db, "authenticated", claims_for(TENANT)) as conn:
        conn.execute(insert, ("u" * MAX_URI_CHARS,))
    for uri, unit in (("u" * (MAX_URI_CHARS + 1), "characters"), ("é" * 1025, "bytes")):
        with (
            pytest.raises(psycopg.errors.InvalidParameterValue, match=f"{MAX_URI_CHARS} {unit}"),
            request(db, "authenticated", claims_for(TENANT)) as conn,
        ):
            conn.execute(insert, (uri,))


def test_a_direct_write_within_bounds_is_accepted(db: str, owner: psycopg.Connection[Any]) -> None:
    with request(db, "authenticated", claims_for(TENANT)) as conn:
        row = conn.execute(
            "insert into pgrag.documents (title, source_type, source_uri, metadata) "
            "values (repeat('t', 1000), 'text', repeat('é', 1024), "
            "jsonb_build_object('k', repeat('m', 9000))) returning id, status"
        ).fetchone()
        assert row is not None
        conn.execute("update pgrag.documents set title = 'Parking' where id = %s", (row[0],))
    assert row[1] == "pending"
    assert owner.execute("select title from pgrag.documents").fetchone() == ("Parking",)


@pytest.mark.parametrize(
    "statement",
    [
        "insert into pgrag.documents (source_type, source_uri, status) "
        "values ('text', 'b', 'ready')",
        "update pgrag.documents set status = 'ready'",
        "update pgrag.documents set status = 'processing'",
        "update pgrag.documents set error = repeat('e', 100000)",
        "update pgrag.documents set chunk_count = 1000000",
        "update pgrag.documents set content_sha256 = 'x'",
        "update pgrag.documents set embedding_model = 'other-model'",
        "update pgrag.documents set updated_at = 'infinity'",
        "insert into pgrag.documents (source_type, source_uri, created_at) "
        "values ('text', 'b', 'infinity')",
    ],
    ids=[
        "insert-ready",
        "ready",
        "processing",
        "error",
        "chunk-count",
        "content-sha256",
        "embedding-model",
        "updated-at",
        "created-at",
    ],
)
def test_a_tenant_cannot_write_the_bookkeeping_of_its_documents(
    db: str, owner: psycopg.Connection[Any], statement: str
) -> None:
    doc = submit(db, "a.txt")[0]
    before = owner.execute("select * from pgrag.documents where id = %s", (doc,)).fetchone()
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"),
        request(db, "authenticated", claims_for(TENANT)) as conn,
    ):
        conn.execute(statement)
    assert owner.execute("select * from pgrag.documents").fetchall() == [before]


def test_a_tenants_new_document_is_pending_whatever_it_inserts(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    with request(db, "authenticated", claims_for(TENANT)) as conn:
        conn.execute(
            "insert into pgrag.documents (source_type, source_uri) values ('text', 'direct.txt')"
        )
    row = owner.execute(
        "select status, chunk_count, content_sha256 from pgrag.documents"
    ).fetchone()
    assert row == ("pending", 0, None)


def test_a_direct_update_does_not_make_a_failed_document_pending(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    doc = submit(db, "a.txt")[0]
    fail_for_good(owner, doc)
    assert status_of(owner, doc)[0] == "error"
    with request(db, "authenticated", claims_for(TENANT)) as conn:
        conn.execute("update pgrag.documents set title = 'Renamed' where id = %s", (doc,))
    assert status_of(owner, doc)[0] == "error"


def test_resubmitting_a_failed_document_makes_it_pending_without_its_error(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    doc = submit(db, "a.txt")[0]
    fail_for_good(owner, doc)
    assert status_of(owner, doc) == ("error", "boom")

    assert submit(db, "a.txt", "Fixed text.") == (doc, 2, "pending")
    assert status_of(owner, doc) == ("pending", None)


@pytest.mark.parametrize(
    ("columns", "values", "message"),
    [
        ("content", "repeat('x', 1001)", "content must have at most 1000 bytes"),
        ("content, heading_path", "'x', array[repeat('h', 10000)]", "heading_path must have"),
        ("content, metadata", "'x', jsonb_build_object('k', repeat('m', 10000))", "metadata must"),
        ("content, metadata", "'x', '[1]'::jsonb", "metadata must be a JSON object"),
    ],
    ids=["content", "heading-path", "metadata-size", "metadata-not-object"],
)
def test_a_direct_chunk_write_out_of_bounds_is_refused(
    db: str, owner: psycopg.Connection[Any], columns: str, values: str, message: str
) -> None:
    owner.execute("update pgrag.queue_settings set max_content_bytes = 1000")
    doc = submit(db, "a.txt")[0]
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue, match=message),
        request(db, "authenticated", claims_for(TENANT)) as conn,
    ):
        conn.execute(
            f"insert into pgrag.chunks (document_id, chunk_index, content_sha256, {columns}) "
            f"values (%s, 0, 'x', {values})",
            (doc,),
        )
    assert owner.execute("select count(*) from pgrag.chunks").fetchone() == (0,)


def test_a_direct_chunk_update_to_oversized_content_is_refused(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    owner.execute("update pgrag.queue_settings set max_content_bytes = 1000")
    doc = submit(db, "a.txt")[0]
    with request(db, "authenticated", claims_for(TENANT)) as conn:
        conn.execute(
            "insert into pgrag.chunks (document_id, chunk_index, content, content_sha256) "
            "values (%s, 0, repeat('x', 1000), 'x')",
            (doc,),
        )
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue, match="content must have at most"),
        request(db, "authenticated", claims_for(TENANT)) as conn,
    ):
        conn.execute("update pgrag.chunks set content = content || 'y'")
    assert owner.execute("select length(content) from pgrag.chunks").fetchone() == (1000,)


def test_a_submitted_document_is_completed_by_the_worker_and_deleted_by_its_tenant(
    db: str, owner: psycopg.Connection[Any], local_embedder: Any
) -> None:
    doc = submit(db, "parking.md", "Parking is behind building B. Badges open the gate.")[0]

    drain(db, local_embedder)

    row = owner.execute(
        "select status, chunk_count > 0, content_sha256 is not null from pgrag.documents"
    ).fetchone()
    assert row == ("ready", True, True)
    assert submit(db, "parking.md", "Parking moved to building C.")[2] == "ready"
    with request(db, "authenticated", claims_for(TENANT)) as conn:
        deleted = conn.execute(
            "select document_id from pgrag.delete_documents(source_uris => array['parking.md'])"
        ).fetchall()
    assert deleted == [(doc,)]
    assert owner.execute("select count(*) from pgrag.documents").fetchone() == (0,)
