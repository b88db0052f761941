"""What one tenant can write, and what its writes can cost the server and the other tenants.

Every call goes through the PostgREST replay of plugins.tenancy (a LOGIN NOINHERIT
authenticator, ``set local role``, local claims). Checked: arguments a tenant writes are bounded
in bytes where an index holds them; the query-embedding cache and the search log are bounded
per tenant; the BM25 statistics are written by pgrag's triggers alone.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from plugins.tenancy import Loaded, api_dsn, claims_for, request

from pgrag.db import connect


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


# -- the BM25 index: written by pgrag's trigger alone -------------------------------------------

BM25_WRITES = [
    "update pgrag.bm25_lexicon set df = -1000000000",
    "delete from pgrag.bm25_lexicon",
    "insert into pgrag.bm25_lexicon (tenant_id, lexeme, shard, df) values ('acme', 'vacat', 0, -1)",
    "update pgrag.corpus_stats set chunk_count = 1000000000",
    "insert into pgrag.bm25_postings (tenant_id, lexeme, chunk_id, tf, doc_len) "
    "select 'acme', 'vacat', g, 1, 1 from generate_series(1000000, 1050000) as g",
    "delete from pgrag.bm25_postings",
    "insert into pgrag.bm25_backlog (tenant_id, chunk_id) values ('acme', 1)",
]


@pytest.mark.parametrize("statement", BM25_WRITES)
@pytest.mark.parametrize("role", ["authenticated", "service_role"])
def test_no_api_role_writes_the_bm25_index(
    db: str, authenticator: str, role: str, statement: str
) -> None:
    claims = claims_for("acme") if role == "authenticated" else None
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege),
        request(db, role, claims) as conn,
    ):
        conn.execute(statement)


def across_tenants(db: str) -> list[Any]:
    with request(db, "service_role") as conn:
        return conn.execute(
            "select tenant_id, chunk_id, score from public.keyword_search('vacation policy', 10)"
        ).fetchall()


def test_a_tenants_attempt_on_the_bm25_index_leaves_a_search_across_tenants_unchanged(
    two_tenants: Loaded,
) -> None:
    before = across_tenants(two_tenants.db)
    assert {t for t, _, _ in before} == {"acme", "globex"}
    for statement in BM25_WRITES:
        with (
            pytest.raises(psycopg.errors.InsufficientPrivilege),
            request(two_tenants.db, "authenticated", claims_for("acme")) as conn,
        ):
            conn.execute(statement)
    assert across_tenants(two_tenants.db) == before


def test_a_tenants_chunks_are_still_indexed_as_it_writes_them(two_tenants: Loaded) -> None:
    doc = two_tenants.documents["acme"][0]
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        (chunk,) = conn.execute(
            "insert into pgrag.chunks (document_id, chunk_index, content, content_sha256) "
            "values (%s, 77, 'quokka habitat', 'x') returning id",
            (doc,),
        ).fetchone()  # type: ignore[misc]
        assert conn.execute(
            "select tenant_id, chunk_id from pgrag.bm25_postings where lexeme = 'quokka'"
        ).fetchall() == [("acme", chunk)]
        conn.execute("update pgrag.chunks set content = 'wombat burrow' where id = %s", (chunk,))
        assert conn.execute(
            "select lexeme from pgrag.bm25_postings where chunk_id = %s order by 1", (chunk,)
        ).fetchall() == [("burrow",), ("wombat",)]
        conn.execute("delete from pgrag.chunks where id = %s", (chunk,))
        assert conn.execute(
            "select count(*) from pgrag.bm25_postings where chunk_id = %s", (chunk,)
        ).fetchone() == (0,)


def test_a_tenant_naming_itself_a_bulk_load_is_still_indexed(two_tenants: Loaded) -> None:
    # The bulk path (rows left for pgrag.finish_bulk_load) is the owner's: a tenant that sets
    # the setting its loader uses still gets postings, and lists nothing in the backlog.
    doc = two_tenants.documents["acme"][0]
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        conn.execute("select set_config('pgrag.bulk_load_tenant', 'acme', true)")
        conn.execute(
            "insert into pgrag.chunks (document_id, chunk_index, content, content_sha256) "
            "values (%s, 78, 'quokka habitat', 'x')",
            (doc,),
        )
        assert conn.execute(
            "select count(*) from pgrag.bm25_postings where lexeme = 'quokka'"
        ).fetchone() == (1,)
        assert conn.execute("select count(*) from pgrag.bm25_backlog").fetchone() == (0,)


# -- the search log: bounded per tenant -----------------------------------------------------------


def log_on(db: str) -> None:
    with connect(db) as conn:
        conn.execute("update pgrag.settings set search_log = true, search_log_query_text = true")
        conn.commit()


def log_rows(db: str) -> dict[str, int]:
    with connect(db) as conn:
        return dict(
            conn.execute("select tenant_id, count(*) from pgrag.search_log group by 1").fetchall()
        )


def test_a_logged_query_text_keeps_its_first_1000_characters(db: str, authenticator: str) -> None:
    log_on(db)
    with request(db, "authenticated", claims_for("acme")) as conn:
        assert conn.execute(
            "select public.log_search('hybrid', 5, 3, 0.5, %s)", ("\U0001f600" * 10_000,)
        ).fetchone() == (True,)
        conn.execute(
            "insert into pgrag.search_log (tenant_id, mode, latency_ms, row_count, query_text) "
            "values ('acme', 'vector', 1, 1, repeat('q', 10000))"
        )
    with connect(db) as conn:
        lengths = conn.execute(
            "select length(query_text) from pgrag.search_log order by id"
        ).fetchall()
    assert lengths == [(1000,), (1000,)]


def test_a_tenants_search_log_keeps_at_most_its_bound(db: str, authenticator: str) -> None:
    log_on(db)
    with connect(db) as conn:
        (bound,) = conn.execute("select pgrag.search_log_max_rows()").fetchone()  # type: ignore[misc]
        for tenant in ("acme", "globex"):
            conn.execute(
                "insert into pgrag.search_log (tenant_id, mode, latency_ms, row_count) "
                "select %s, 'hybrid', 1, 1 from generate_series(1, %s)",
                (tenant, bound),
            )
        conn.commit()
    assert bound == 100_000 and log_rows(db) == {"acme": bound, "globex": bound}
    # A statement of many rows is trimmed at once, oldest first.
    with request(db, "authenticated", claims_for("acme")) as conn:
        conn.execute(
            "insert into pgrag.search_log (tenant_id, mode, latency_ms, row_count, query_text) "
            "select 'acme', 'keyword', 2, 2, 'new' from generate_series(1, 5000)"
        )
    assert log_rows(db) == {"acme": bound, "globex": bound}
    # One row at a time (public.log_search, one request each): trimmed every 64 calls on
    # average, never another tenant's rows.
    with connect(api_dsn(db)) as conn:
        for _ in range(2000):
            with conn.transaction():
                conn.execute("set local role authenticated")
                conn.execute(
                    "select set_config('request.jwt.claims', %s, true)",
                    (json.dumps(claims_for("acme")),),
                )
                conn.execute("select public.log_search('vector', 1, 1, null, 'a question')")
    counts = log_rows(db)
    assert bound <= counts["acme"] < bound + 1000, counts
    assert counts["globex"] == bound
    with connect(db) as conn:
        assert conn.execute(
            "select count(*) from pgrag.search_log where tenant_id = 'acme' and query_text = 'new'"
        ).fetchone() == (5000,)
