"""Text-only search on a server without PL/Python (the embedded PostgreSQL: the stubs).

public.hybrid_search_text and pgrag.embed_query answer a query the tenant's query-embedding
cache holds exactly as hybrid_search does with that embedding, and raise one clear error
(SQLSTATE PR301, naming the alternatives) otherwise. The PL/Python variant on a real server:
tests/test_plpython_pg15.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from plugins.tenancy import Loaded, claims_for, request

from pgrag.cli import main
from pgrag.db import connect

QUERY = "vacation policy paid leave"
MODEL = "all-MiniLM-L6-v2"  # what two_tenants records


@pytest.fixture
def cached(two_tenants: Loaded, local_embedder: Any) -> np.ndarray:
    """QUERY's embedding, stored in acme's cache by a writer (as the CLI will)."""
    vector = np.asarray(local_embedder.embed([QUERY])[0], dtype=np.float32)
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        conn.execute("select pgrag.query_cache_put(%s, %s, %s)", (MODEL, QUERY, vector))
    return vector


def rows(conn: psycopg.Connection[Any], query: str, args: Any = ()) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.execute(query, args).fetchall()]


def test_the_embedded_server_gets_the_stubs_and_status_says_so(db: str) -> None:
    result = CliRunner().invoke(main, ["--dsn", db, "status", "--json"])
    assert result.exit_code == 0, result.output
    status = json.loads(result.output)
    assert (status["text_search"], status["text_search_wanted"]) == ("stub", "stub")
    with connect(db) as conn:
        languages = dict(
            rows(
                conn,
                "select p.proname, l.lanname from pg_proc p join pg_language l "
                "on l.oid = p.prolang where p.pronamespace = 'pgrag'::regnamespace "
                "and p.proname in ('compute_query_embedding', 'chunk_text')",
            )
        )
    assert languages == {"compute_query_embedding": "plpgsql", "chunk_text": "plpgsql"}


def test_an_uncached_query_raises_one_clear_error_naming_the_alternatives(
    two_tenants: Loaded,
) -> None:
    with (
        pytest.raises(psycopg.Error) as caught,
        request(two_tenants.db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute("select * from public.hybrid_search_text(%s)", (QUERY,))
    error = caught.value
    assert error.sqlstate == "PR301"
    assert error.diag.message_primary == (
        "text search needs the query's embedding: this server has no PL/Python to compute it, "
        "and the query-embedding cache holds none for this query"
    )
    hint = error.diag.message_hint or ""
    assert "hybrid_search(query_text, query_embedding" in hint
    assert "keyword_search(query_text" in hint and "pgrag embed" in hint


def test_a_cached_query_returns_the_rows_of_hybrid_search(
    two_tenants: Loaded, cached: np.ndarray
) -> None:
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        text = rows(conn, "select * from public.hybrid_search_text(%s, 5)", (QUERY,))
        embedded = rows(conn, "select * from public.hybrid_search(%s, %s, 5)", (QUERY, cached))
        spaced = rows(conn, "select * from public.hybrid_search_text(%s, 5)", (f"  {QUERY}\n",))
    assert text and text == embedded
    assert {r[-1] for r in text} == {"acme"}  # row level security applies
    assert [r[:-1] for r in spaced] == [r[:-1] for r in text]  # the normalised text hits


@pytest.mark.parametrize(
    "options",
    [
        {"fusion": "rrf", "rrf_k": 10},
        {"window_size": 1},
        {"mmr_lambda": 0.5, "candidate_count": 20},
        {"min_score": 0.3, "vector_weight": 2.0, "keyword_weight": 0.5},
        {"metadata_filter": json.dumps({"team": "acme"}), "source_types": ["markdown"]},
        {"match_count": 0},
    ],
)
def test_options_and_filters_reach_hybrid_search(
    two_tenants: Loaded, cached: np.ndarray, options: dict[str, Any]
) -> None:
    named = "".join(f", {k} => %({k})s" for k in options)
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        text = rows(
            conn,
            f"select * from public.hybrid_search_text(%(q)s{named})",
            {"q": QUERY, **options},
        )
        embedded = rows(
            conn,
            f"select * from public.hybrid_search(%(q)s, %(e)s{named})",
            {"q": QUERY, "e": cached, **options},
        )
    assert text == embedded


def test_hybrid_search_text_has_hybrid_searchs_arguments_defaults_and_columns(db: str) -> None:
    with connect(db) as conn:
        found = dict(
            rows(
                conn,
                "select p.proname, pg_get_function_arguments(p.oid) || ' -> ' || "
                "pg_get_function_result(p.oid) from pg_proc p "
                "where p.pronamespace = 'public'::regnamespace "
                "and p.proname in ('hybrid_search', 'hybrid_search_text')",
            )
        )
    without_embedding = found["hybrid_search"].replace(", query_embedding vector,", ",", 1)
    assert found["hybrid_search_text"] == without_embedding


def test_text_search_runs_in_a_read_only_transaction(
    two_tenants: Loaded, cached: np.ndarray
) -> None:
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        conn.execute("set transaction read only")
        assert rows(conn, "select chunk_id from public.hybrid_search_text(%s, 3)", (QUERY,))


def test_another_tenant_and_anon_never_hit_a_tenants_cache(
    two_tenants: Loaded, cached: np.ndarray
) -> None:
    for role, claims in (("authenticated", claims_for("globex")), ("anon", None)):
        with pytest.raises(psycopg.Error) as caught, request(two_tenants.db, role, claims) as conn:
            conn.execute("select * from public.hybrid_search_text(%s)", (QUERY,))
        assert caught.value.sqlstate == "PR301"


def test_embed_query_returns_the_cached_embedding(two_tenants: Loaded, cached: np.ndarray) -> None:
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        (vector,) = conn.execute("select pgrag.embed_query(%s)", (QUERY,)).fetchone()  # type: ignore[misc]
    assert np.allclose(vector.to_numpy(), cached)


@pytest.mark.parametrize(
    ("query_text", "message"),
    [
        ("x" * 10_001, "query_text must have at most 10000 characters (got 10001)"),
        (None, "query_text must not be null"),
    ],
)
def test_query_text_out_of_range_is_refused_with_22023(
    two_tenants: Loaded, query_text: str | None, message: str
) -> None:
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue, match=re.escape(message)),
        request(two_tenants.db, "anon") as conn,
    ):
        conn.execute("select * from public.hybrid_search_text(%s::text)", (query_text,))


def test_chunk_text_without_plpython_raises_pr301(two_tenants: Loaded) -> None:
    with (
        pytest.raises(psycopg.Error) as caught,
        request(two_tenants.db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute("select * from pgrag.chunk_text('Some text.')")
    assert caught.value.sqlstate == "PR301"
    assert "pgrag ingest" in (caught.value.diag.message_hint or "")


def test_pr301_becomes_the_text_search_unavailable_error(db: str) -> None:
    from pgrag.errors import TextSearchUnavailable, from_database_error

    with connect(db) as conn, pytest.raises(psycopg.Error) as caught:
        conn.execute("select pgrag.embed_query('anything')")
    error = from_database_error(caught.value)
    assert isinstance(error, TextSearchUnavailable)
    assert str(error).startswith("text search needs the query's embedding")
