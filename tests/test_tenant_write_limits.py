"""What one tenant can write, and what its writes can cost the server and the other tenants.

Every call goes through the PostgREST replay of plugins.tenancy (a LOGIN NOINHERIT
authenticator, ``set local role``, local claims). Checked: arguments a tenant writes are bounded
in bytes where an index holds them; the query-embedding cache and the search log are bounded
per tenant; the BM25 statistics are written by pgrag's triggers alone.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from plugins.tenancy import claims_for, request


def submit(db: str, tenant: str, uri: str, content: str | None = "Some text.") -> Any:
    with request(db, "authenticated", claims_for(tenant)) as conn:
        return conn.execute(
            "select * from public.submit_document(source_uri => %s, content => %s)",
            (uri, content),
        ).fetchone()


# -- source_uri: bounded in bytes ---------------------------------------------------------------


def test_a_source_uri_of_2048_four_byte_characters_is_refused_as_an_argument(
    db: str, authenticator: str
) -> None:
    # 8 kB in UTF-8: past what the unique index on (tenant_id, source_uri) holds (54000 before).
    with pytest.raises(psycopg.errors.InvalidParameterValue) as raised:
        submit(db, "acme", "\U0001f600" * 2048)
    message = raised.value.diag.message_primary or ""
    assert message.startswith("source_uri must have at most 2048 bytes"), message


def test_a_source_uri_of_2048_bytes_is_accepted(db: str, authenticator: str) -> None:
    row = submit(db, "acme", "\U0001f600" * 512)
    assert row is not None and row[2] == "pending"


def test_document_status_bounds_source_uris_in_bytes(db: str, authenticator: str) -> None:
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue),
        request(db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute(
            "select * from public.document_status(source_uris => %s)", (["\U0001f600" * 600],)
        )
