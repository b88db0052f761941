"""Pages, quoted phrases and highlights through PostgREST, as anon and as a tenant.

Each call is the statement PostgREST runs for ``supabase.rpc(name, body)``: the JSON body turned
into named arguments by ``json_to_record``, inside a request as the role with its JWT claims
(plugins.tenancy), never the superuser.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import psycopg
import pytest
from plugins.tenancy import Loaded, claims_for, request
from psycopg import sql

from pgrag.db import vector_schema

QUERY = "vacation policy paid leave"
# The argument types PostgREST reads from the function's signature.
TYPES = {
    "query_text": "text",
    "query_embedding": "{vector}.vector",
    "match_count": "integer",
    "match_offset": "integer",
    "chunk_ids": "bigint[]",
}


def rpc(conn: psycopg.Connection[Any], function: str, body: dict[str, Any]) -> list[Any]:
    """``supabase.rpc(function, body)``: the rows as PostgREST's JSON objects."""
    vschema = vector_schema(conn)
    assert vschema is not None
    columns = ", ".join(f"{k} {TYPES[k].format(vector=vschema)}" for k in body)
    named = ", ".join(f'"{k}" := (select {k} from pgrst_args)' for k in body)
    statement = (
        f"with pgrst_args as (select * from json_to_record(%s::json) as _({columns})) "
        f"select to_jsonb(pgrst_call) from public.{function}({named}) as pgrst_call"
    )
    rows = conn.execute(sql.SQL(statement), (json.dumps(body),)).fetchall()  # type: ignore[arg-type]
    return [r[0] for r in rows]


@pytest.fixture
def embedding(local_embedder: Any) -> list[float]:
    return [float(x) for x in np.asarray(local_embedder.embed([QUERY])[0])]


def who(role: str) -> tuple[str, dict[str, Any] | None]:
    return ("anon", None) if role == "anon" else ("authenticated", claims_for(role))


@pytest.mark.parametrize("function", ["vector_search", "hybrid_search"])
@pytest.mark.parametrize("caller", ["acme", "anon"])
def test_pages_through_rpc_concatenate_to_one_call(
    two_tenants: Loaded, embedding: list[float], function: str, caller: str
) -> None:
    body = {"query_text": QUERY, "query_embedding": embedding}
    if function == "vector_search":
        del body["query_text"]
    with request(two_tenants.db, *who(caller)) as conn:
        whole = rpc(conn, function, {**body, "match_count": 4})
        first = rpc(conn, function, {**body, "match_count": 2})
        second = rpc(conn, function, {**body, "match_count": 2, "match_offset": 2})
    assert [r["chunk_id"] for r in first + second] == [r["chunk_id"] for r in whole] != []
    assert [r["rank"] for r in second] == [3, 4][: len(second)]
    visible = two_tenants.public_chunks if caller == "anon" else two_tenants.chunks["acme"]
    assert {r["chunk_id"] for r in whole} <= set(visible)


def test_a_quoted_phrase_through_rpc_is_required_for_the_tenant(two_tenants: Loaded) -> None:
    with request(two_tenants.db, *who("acme")) as conn:
        rows = rpc(conn, "keyword_search", {"query_text": '"paid leave" reports'})
    assert rows and all("paid leave" in r["content"] for r in rows)
    assert {r["chunk_id"] for r in rows} <= set(two_tenants.chunks["acme"])


@pytest.mark.parametrize("caller", ["acme", "anon"])
@pytest.mark.parametrize("query", ['"paid leave', '" OR "', "-vacation", '-"paid leave"', "OR"])
def test_malformed_query_syntax_through_rpc_is_never_an_error(
    two_tenants: Loaded, embedding: list[float], caller: str, query: str
) -> None:
    with request(two_tenants.db, *who(caller)) as conn:
        rows = rpc(conn, "hybrid_search", {"query_text": query, "query_embedding": embedding})
        keyword = rpc(conn, "keyword_search", {"query_text": query})
    visible = two_tenants.public_chunks if caller == "anon" else two_tenants.chunks["acme"]
    assert {r["chunk_id"] for r in rows + keyword} <= set(visible)


def test_highlight_through_rpc_marks_only_the_callers_chunks(two_tenants: Loaded) -> None:
    every = two_tenants.chunks["acme"] + two_tenants.chunks["globex"]
    with request(two_tenants.db, *who("acme")) as conn:
        rows = rpc(conn, "highlight", {"chunk_ids": every, "query_text": "vacation"})
    assert {r["chunk_id"] for r in rows} == set(two_tenants.chunks["acme"])
    marked = [r for r in rows if r["matches"]]
    assert marked and all("<mark>vacation</mark>" in r["snippet"].lower() for r in marked)


def test_highlight_through_rpc_as_anon_reads_public_chunks_only(two_tenants: Loaded) -> None:
    every = two_tenants.chunks["acme"] + two_tenants.chunks["globex"]
    with request(two_tenants.db, *who("anon")) as conn:
        rows = rpc(conn, "highlight", {"chunk_ids": every, "query_text": "vacation"})
    assert {r["chunk_id"] for r in rows} == set(two_tenants.public_chunks)
