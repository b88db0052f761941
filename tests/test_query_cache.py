"""The query-embedding cache (incremental/008, idempotent/050): its key, its tenancy, its bound."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import psycopg
import pytest
from plugins.tenancy import Loaded, claims_for, request

from pgrag.db import connect

MODEL = "all-MiniLM-L6-v2"  # what two_tenants records as the model


@pytest.fixture
def vector() -> np.ndarray:
    v = np.arange(1, 385, dtype=np.float32)
    return v / np.linalg.norm(v)


def put(db: str, tenant: str, text: str, vector: np.ndarray, model: str = MODEL) -> bool:
    with request(db, "authenticated", claims_for(tenant)) as conn:
        (stored,) = conn.execute(
            "select pgrag.query_cache_put(%s, %s, %s)", (model, text, vector)
        ).fetchone()  # type: ignore[misc]
    return bool(stored)


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("  reset   my password \n", "reset my password"),
        ("tab\tand\r\nnewlines", "tab and newlines"),
        ("no\u00a0break\u3000ideographic\u2009thin", "no break ideographic thin"),
        ("Case AND punctuation?!", "Case AND punctuation?!"),
        ("   ", ""),
    ],
)
def test_normalize_query_trims_and_collapses_white_space(
    conn: psycopg.Connection[Any], text: str, normalised: str
) -> None:
    (got,) = conn.execute("select pgrag.normalize_query(%s)", (text,)).fetchone()  # type: ignore[misc]
    assert got == normalised


def test_the_key_is_the_sha256_of_the_normalised_text_in_utf8(
    conn: psycopg.Connection[Any],
) -> None:
    (key,) = conn.execute("select pgrag.query_cache_key(%s)", (" héllo \n wörld ",)).fetchone()  # type: ignore[misc]
    assert key == hashlib.sha256("héllo wörld".encode()).hexdigest()


def test_a_stored_embedding_is_read_back_for_the_same_normalised_query(
    two_tenants: Loaded, vector: np.ndarray
) -> None:
    assert put(two_tenants.db, "acme", "reset my password", vector)
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        (cached,) = conn.execute(
            "select pgrag.cached_query_embedding(%s)", ("  reset  my password",)
        ).fetchone()  # type: ignore[misc]
    assert np.allclose(cached.to_numpy(), vector)


def test_a_writers_hit_counts_and_a_search_read_does_not(
    two_tenants: Loaded, vector: np.ndarray
) -> None:
    put(two_tenants.db, "acme", "q", vector)
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        conn.execute("select pgrag.cached_query_embedding('q')")
        conn.execute("select pgrag.query_cache_get(%s, 'q')", (MODEL,))
        conn.execute("select pgrag.query_cache_get(%s, 'q')", (MODEL,))
        (hits, created, used) = conn.execute(
            "select hit_count, created_at, last_used_at from pgrag.query_embeddings "
            "where query_sha256 = pgrag.query_cache_key('q')"
        ).fetchone()  # type: ignore[misc]
    assert hits == 2 and used >= created


def test_a_tenant_reads_only_its_own_entries(two_tenants: Loaded, vector: np.ndarray) -> None:
    put(two_tenants.db, "acme", "acme's secret question", vector)
    with request(two_tenants.db, "authenticated", claims_for("globex")) as conn:
        assert conn.execute(
            "select count(*) from pgrag.query_embeddings where tenant_id <> 'globex'"
        ).fetchone() == (0,)
        assert conn.execute(
            "select pgrag.cached_query_embedding('acme''s secret question')"
        ).fetchone() == (None,)
        assert conn.execute(
            "select pgrag.query_cache_get(%s, 'acme''s secret question')", (MODEL,)
        ).fetchone() == (None,)
    with request(two_tenants.db, "anon") as conn:
        assert conn.execute("select count(*) from pgrag.query_embeddings").fetchone() == (0,)
        assert conn.execute(
            "select pgrag.cached_query_embedding('acme''s secret question')"
        ).fetchone() == (None,)


def test_the_same_query_of_two_tenants_is_two_entries(
    two_tenants: Loaded, vector: np.ndarray
) -> None:
    put(two_tenants.db, "acme", "q", vector)
    put(two_tenants.db, "globex", "q", -vector)
    with request(two_tenants.db, "authenticated", claims_for("globex")) as conn:
        (cached,) = conn.execute("select pgrag.cached_query_embedding('q')").fetchone()  # type: ignore[misc]
    assert np.allclose(cached.to_numpy(), -vector)


def test_without_a_tenant_nothing_is_stored(two_tenants: Loaded, vector: np.ndarray) -> None:
    with request(two_tenants.db, "service_role") as conn:
        (stored,) = conn.execute(
            "select pgrag.query_cache_put(%s, 'q', %s)", (MODEL, vector)
        ).fetchone()  # type: ignore[misc]
    assert stored is False


def test_anon_cannot_write_the_cache(two_tenants: Loaded, vector: np.ndarray) -> None:
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege),
        request(two_tenants.db, "anon", claims_for("acme")) as conn,
    ):
        conn.execute("select pgrag.query_cache_put(%s, 'q', %s)", (MODEL, vector))


def test_storing_beyond_the_bound_drops_the_least_recently_used(
    two_tenants: Loaded, vector: np.ndarray
) -> None:
    with connect(two_tenants.db) as conn:
        (bound,) = conn.execute("select pgrag.query_cache_max_entries()").fetchone()  # type: ignore[misc]
        conn.execute(
            "insert into pgrag.query_embeddings (tenant_id, model, query_sha256, embedding, "
            "last_used_at) select 'acme', %s, pgrag.query_cache_key('old ' || i), %s, "
            "now() - interval '1 day' + i * interval '1 second' "
            "from generate_series(1, %s) as i",
            (MODEL, vector, bound),
        )
        conn.commit()
    put(two_tenants.db, "acme", "new question", vector)
    with connect(two_tenants.db) as conn:
        keys = {
            r[0]
            for r in conn.execute(
                "select query_sha256 from pgrag.query_embeddings where tenant_id = 'acme'"
            )
        }
        (oldest, newest) = conn.execute(
            "select pgrag.query_cache_key('old 1'), pgrag.query_cache_key('new question')"
        ).fetchone()  # type: ignore[misc]
    assert len(keys) == bound == 10_000
    assert newest in keys and oldest not in keys


def test_prune_keeps_the_most_recent_entries_per_tenant(
    two_tenants: Loaded, vector: np.ndarray
) -> None:
    for tenant in ("acme", "globex"):
        for i in range(4):
            put(two_tenants.db, tenant, f"q{i}", vector)
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        (removed,) = conn.execute("select pgrag.prune_query_cache(1)").fetchone()  # type: ignore[misc]
    # acme held the fixture's entry and 4 more: 4 go; globex's are not the tenant's to see
    assert removed == 4
    with request(two_tenants.db, "service_role") as conn:
        (removed,) = conn.execute("select pgrag.prune_query_cache(2)").fetchone()  # type: ignore[misc]
        left = dict(
            conn.execute(
                "select tenant_id, count(*) from pgrag.query_embeddings group by 1"
            ).fetchall()
        )
    assert removed == 3 and left == {"acme": 1, "globex": 2}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("select pgrag.query_cache_put(repeat('m', 201), 'q', %(v)s)", "model must be"),
        ("select pgrag.query_cache_put('m', repeat('q', 10001), %(v)s)", "query_text must have"),
        ("select pgrag.query_cache_put('m', 'q', array_fill(0, array[384])::vector)", "non-zero"),
        ("select pgrag.cached_query_embedding(repeat('q', 10001))", "query_text must have"),
        ("select pgrag.prune_query_cache(-1)", "max_entries must be between"),
    ],
)
def test_cache_arguments_out_of_range_are_refused_with_22023(
    two_tenants: Loaded, vector: np.ndarray, call: str, message: str
) -> None:
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue, match=message),
        request(two_tenants.db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute(call, {"v": vector})


def test_a_model_other_than_the_databases_is_refused(
    two_tenants: Loaded, vector: np.ndarray
) -> None:
    # A new model name each call once grew the cache without bound (the bound was per model).
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="model must be the model"):
        put(two_tenants.db, "acme", "q", vector, model="model-1")


def test_an_embedding_of_another_dimension_is_refused(
    two_tenants: Loaded, vector: np.ndarray
) -> None:
    big = np.ones(16_000, dtype=np.float32)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="384 dimensions"):
        put(two_tenants.db, "acme", "q", big / np.linalg.norm(big))


def test_nothing_is_cached_before_a_model_is_recorded(
    two_tenants: Loaded, vector: np.ndarray
) -> None:
    with connect(two_tenants.db) as conn:
        conn.execute("update pgrag.embedding_config set model = null")
        conn.commit()
    assert put(two_tenants.db, "acme", "q", vector) is False


def test_a_direct_insert_is_held_to_the_model_and_the_bound(
    two_tenants: Loaded, vector: np.ndarray
) -> None:
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue, match="model must be the model"),
        request(two_tenants.db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute(
            "insert into pgrag.query_embeddings (tenant_id, model, query_sha256, embedding) "
            "values ('acme', 'another-model', pgrag.query_cache_key('q'), %s)",
            (vector,),
        )
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        conn.execute(
            "insert into pgrag.query_embeddings (tenant_id, model, query_sha256, embedding) "
            "select 'acme', %s, pgrag.query_cache_key('q ' || i), %s "
            "from generate_series(1, 10050) as i",
            (MODEL, vector),
        )
    with connect(two_tenants.db) as conn:
        counts = dict(
            conn.execute(
                "select tenant_id, count(*) from pgrag.query_embeddings group by 1"
            ).fetchall()
        )
    assert counts == {"acme": 10_000, "globex": 1}


def test_the_bound_counts_every_model_of_a_tenant(two_tenants: Loaded, vector: np.ndarray) -> None:
    # Entries of an earlier model (the owner may store any) count towards the same bound.
    with connect(two_tenants.db) as conn:
        conn.execute(
            "insert into pgrag.query_embeddings (tenant_id, model, query_sha256, embedding, "
            "last_used_at) select 'acme', 'earlier-model', pgrag.query_cache_key('old ' || i), "
            "%s, now() - interval '1 day' from generate_series(1, 10000) as i",
            (vector,),
        )
        conn.commit()
    assert put(two_tenants.db, "acme", "new question", vector)
    with connect(two_tenants.db) as conn:
        rows = conn.execute(
            "select model, count(*) from pgrag.query_embeddings where tenant_id = 'acme' "
            "group by 1 order by 1"
        ).fetchall()
    assert sum(n for _, n in rows) == 10_000
    assert dict(rows)[MODEL] == 2  # the fixture's entry and the new one
