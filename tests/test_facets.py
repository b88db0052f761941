"""Facets (public.search_facets): counts of matching documents per source type, month and
metadata value, for the caller's tenant only, each equal to what its filter returns.

Connections are PostgREST-style requests (plugins.tenancy): the login role switching to anon or
authenticated with JWT claims, never the superuser.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import psycopg
import pytest
from plugins.tenancy import Loaded, claims_for, request
from psycopg import sql

from pgrag.db import connect, vector_schema

QUERY = "vacation policy"
# Documents added to the two tenants' corpus: (tenant, title, source type, created_at,
# metadata, public, chunks). Globex alone has a pdf, a "legal" team and a 2024 document.
EXTRA: list[tuple[str, str, str, str, dict[str, Any], bool, list[str]]] = [
    (
        "acme",
        "acme/vacation.html",
        "html",
        "2026-03-15T12:00:00Z",
        {"team": "hr", "tags": ["policy", "leave"]},
        False,
        ["The vacation policy of the Acme sales team.", "Sales targets for the next quarter."],
    ),
    (
        "acme",
        "acme/holiday.txt",
        "text",
        "2026-04-01T00:00:00Z",
        {"team": "hr", "tags": ["leave"], "year": 2026},
        True,
        ["Holiday calendar and vacation days for Acme staff."],
    ),
    (
        "acme",
        "acme/manual.txt",
        "text",
        "2026-04-30T23:59:59Z",
        {"team": "ops"},
        False,
        ["The forklift manual: never carry passengers."],
    ),
    (
        "globex",
        "globex/legal.pdf",
        "pdf",
        "2024-01-10T00:00:00Z",
        {"team": "legal", "tags": ["policy"]},
        False,
        ["Globex legal vacation policy for henchmen."],
    ),
]


def add_documents(db: str, local_embedder: Any) -> dict[str, list[int]]:
    """Insert EXTRA as superuser; the new document ids per tenant."""
    ids: dict[str, list[int]] = {"acme": [], "globex": []}
    with connect(db) as conn:
        for tenant, title, stype, created, meta, public, texts in EXTRA:
            (doc_id,) = conn.execute(
                "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status, "
                "is_public, chunk_count, metadata, created_at) "
                "values (%s, %s, %s, %s, 'ready', %s, %s, %s, %s) returning id",
                (tenant, title, stype, title, public, len(texts), json.dumps(meta), created),
            ).fetchone()
            ids[tenant].append(doc_id)
            for i, (text, emb) in enumerate(zip(texts, local_embedder.embed(texts), strict=True)):
                conn.execute(
                    "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, "
                    "embedding, content_sha256, token_count) "
                    "values (%s, %s, %s, %s, %s, md5(%s), 10)",
                    (tenant, doc_id, i, text, emb, text),
                )
        conn.commit()
    return ids


@pytest.fixture
def corpus(two_tenants: Loaded, local_embedder: Any) -> Loaded:
    added = add_documents(two_tenants.db, local_embedder)
    for tenant, ids in added.items():
        two_tenants.documents[tenant].extend(ids)
    return two_tenants


def facets(conn: psycopg.Connection[Any], query: str | None, **args: Any) -> list[tuple[Any, ...]]:
    named = "".join(f", {k} := %({k})s" for k in args)
    return conn.execute(
        f"select facet, value, documents, filter from public.search_facets("
        f"query_text := %(q)s{named})",
        {"q": query, **args},
    ).fetchall()


def filtered_documents(
    conn: psycopg.Connection[Any], query: str | None, emb: Any, filter_args: dict[str, Any]
) -> set[int]:
    """Documents a search narrowed by ``filter_args`` returns: keyword_search for a query,
    vector_search (every chunk passing the filters) for a blank one."""
    args = dict(filter_args)
    if "metadata_filter" in args:
        args["metadata_filter"] = json.dumps(args["metadata_filter"])
    named = "".join(f", {k} := %({k})s" for k in args)
    if query:
        statement = f"select document_id from public.keyword_search(%(q)s, 1000{named})"
    else:
        statement = f"select document_id from public.vector_search(%(e)s, 1000{named})"
    return {r[0] for r in conn.execute(statement, {"q": query, "e": emb, **args})}


@pytest.mark.parametrize(
    "query", [QUERY, "vacation -sales", '"paid leave"', '"vacation policy" calendar', None]
)
def test_each_facet_count_equals_the_documents_its_filter_returns(
    corpus: Loaded, local_embedder: Any, query: str | None
) -> None:
    emb = np.asarray(local_embedder.embed([QUERY])[0], dtype=np.float32)
    with request(corpus.db, "authenticated", claims_for("acme")) as conn:
        rows = facets(conn, query, metadata_keys=["team", "tags", "year"])
        assert rows
        for facet, value, count, filter_args in rows:
            found = filtered_documents(conn, query, emb, filter_args)
            assert len(found) == count, (facet, value, filter_args, found)
            assert found <= set(corpus.documents["acme"])
        everything = filtered_documents(conn, query, emb, {})
    by_facet: dict[str, int] = {}
    for facet, _, count, _ in rows:
        by_facet[facet] = by_facet.get(facet, 0) + count
    # Each document has one source type and one month: those facets partition the matches.
    assert by_facet["source_type"] == by_facet["month"] == len(everything)


def test_facets_name_values_and_filters_a_frontend_can_use(corpus: Loaded) -> None:
    with request(corpus.db, "authenticated", claims_for("acme")) as conn:
        rows = facets(conn, None, metadata_keys=["team", "tags"])
    got = {(f, v): (n, flt) for f, v, n, flt in rows}
    assert got[("source_type", "text")] == (2, {"source_types": ["text"]})
    n, flt = got[("month", "2026-04")]
    assert n == 2
    assert flt.keys() == {"created_after", "created_before"}
    assert flt["created_after"].startswith("2026-04-01T00:00:00")
    assert got[("metadata.team", "hr")] == (2, {"metadata_filter": {"team": "hr"}})
    assert got[("metadata.tags", "leave")] == (2, {"metadata_filter": {"tags": ["leave"]}})
    # Largest counts first within a facet; facets in a fixed order.
    assert rows[0][0] == "source_type"
    teams = [n for f, _, n, _ in rows if f == "metadata.team"]
    assert teams == sorted(teams, reverse=True)


def test_facets_never_count_another_tenants_documents(corpus: Loaded) -> None:
    with request(corpus.db, "authenticated", claims_for("acme")) as conn:
        rows = facets(conn, QUERY, metadata_keys=["team", "tags"])
        browse = facets(conn, None, metadata_keys=["team", "tags"])
    values = {(f, v) for f, v, _, _ in rows + browse}
    assert ("source_type", "pdf") not in values
    assert ("metadata.team", "legal") not in values
    assert ("metadata.team", "globex") not in values
    assert ("month", "2024-01") not in values
    total = sum(n for f, _, n, _ in browse if f == "source_type")
    assert total == len(corpus.documents["acme"])
    with request(corpus.db, "authenticated", claims_for("globex")) as conn:
        theirs = {(f, v) for f, v, _, _ in facets(conn, QUERY, metadata_keys=["team"])}
    assert ("source_type", "pdf") in theirs  # the value exists, in the other tenant only


def test_anon_counts_only_public_documents(corpus: Loaded) -> None:
    with request(corpus.db, "anon") as conn:
        browse = facets(conn, None, metadata_keys=["team"])
        keyword = facets(conn, QUERY)
    total = sum(n for f, _, n, _ in browse if f == "source_type")
    assert total == len(corpus.public_documents) + 1  # acme/holiday.txt is public too
    assert ("metadata.team", "globex") not in {(f, v) for f, v, _, _ in browse}
    # As keyword_search: anon reads no BM25 statistics, so a query matches nothing.
    assert keyword == []


def test_claims_without_a_tenant_count_nothing(corpus: Loaded) -> None:
    with request(corpus.db, "authenticated", {"role": "authenticated"}) as conn:
        assert facets(conn, None) == []
        assert facets(conn, QUERY) == []


def test_values_per_facet_are_bounded_by_max_values(corpus: Loaded) -> None:
    with request(corpus.db, "authenticated", claims_for("acme")) as conn:
        rows = facets(conn, None, metadata_keys=["team"], max_values=1)
        months = [v for f, v, _, _ in facets(conn, None) if f == "month"]
    per_facet: dict[str, int] = {}
    for f, *_ in rows:
        per_facet[f] = per_facet.get(f, 0) + 1
    assert per_facet == {"source_type": 1, "month": 1, "metadata.team": 1}
    assert len(months) > 1
    assert ("month", max(months)) in {(f, v) for f, v, _, _ in rows}  # the latest month


@pytest.mark.parametrize(
    "args",
    [
        {"max_values": 0},
        {"metadata_keys": [f"k{i}" for i in range(11)]},
        {"metadata_keys": [""]},
        {"metadata_keys": ["k" * 201]},
        {"language": "klingon"},
        {"source_types": ["x"] * 101},
    ],
    ids=["max-values", "eleven-keys", "empty-key", "long-key", "language", "source-types"],
)
def test_out_of_range_facet_arguments_fail_with_22023(corpus: Loaded, args: dict[str, Any]) -> None:
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue),
        request(corpus.db, "authenticated", claims_for("acme")) as conn,
    ):
        facets(conn, QUERY, **args)


def test_postgrest_rpc_returns_facets_as_supabase_js_sends_it(corpus: Loaded) -> None:
    # supabase.rpc('search_facets', {query_text, metadata_keys}): a JSON body, named arguments.
    body = json.dumps({"query_text": QUERY, "metadata_keys": ["team"], "max_values": 5})
    with request(corpus.db, "authenticated", claims_for("acme")) as conn:
        assert vector_schema(conn) is not None
        rows = conn.execute(
            sql.SQL(
                "with pgrst_args as (select * from json_to_record(%s::json) as _("
                "query_text text, metadata_keys text[], max_values integer)) "
                "select to_jsonb(pgrst_call) from public.search_facets("
                '"query_text" := (select query_text from pgrst_args), '
                '"metadata_keys" := (select metadata_keys from pgrst_args), '
                '"max_values" := (select max_values from pgrst_args)) as pgrst_call'
            ),
            (body,),
        ).fetchall()
    facets_by_name = {(r[0]["facet"], r[0]["value"]): r[0]["documents"] for r in rows}
    assert facets_by_name[("metadata.team", "acme")] == 2
    assert set(rows[0][0]) == {"facet", "value", "documents", "filter"}
