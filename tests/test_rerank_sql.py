"""Re-ranking in SQL: public.rerank (row level security, order, limits), its stub on a server
without PL/Python, and the PL/Python body of pgrag.rerank_scores run against the plpy stub with
the tiny cross-encoder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from plugins.plpython import plpython_functions, run_plpython, stub_functions
from plugins.tenancy import Loaded, claims_for, request

from pgrag.db import connect
from pgrag.errors import TextSearchUnavailable, from_database_error
from pgrag.plpython.plpy_stub import Error, PlpyStub, SPIError
from pgrag.plpython.server import RERANKER_KEY
from pgrag.rerank.local import CrossEncoderReranker

REPO = Path(__file__).resolve().parents[1]
RERANK_SQL = REPO / "sql" / "idempotent" / "052-rerank.sql"
# The model's part replaced in this test database: a chunk scores minus its length, so the
# shortest candidate ranks first. Everything else (RLS, order, ties, limits) is public.rerank's.
BY_LENGTH = """
create or replace function pgrag.rerank_scores(query_text text, documents text[])
returns double precision[] language sql stable security invoker
set search_path = pg_catalog, pg_temp
as $$ select pg_catalog.array_agg(-pg_catalog.length(d)::double precision order by o)
      from pg_catalog.unnest(documents) with ordinality as u(d, o) $$
"""


def test_without_plpython_rerank_says_what_to_do_instead(db: str) -> None:
    with connect(db) as conn, pytest.raises(psycopg.Error) as caught:
        conn.execute("select * from public.rerank('q', array[1::bigint], 5)")
    assert caught.value.sqlstate == "PR301"
    assert isinstance(from_database_error(caught.value), TextSearchUnavailable)
    assert "needs PL/Python" in str(caught.value)
    assert "pgrag search --rerank" in (caught.value.diag.message_hint or "")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("public.rerank('q', null, 5)", "chunk_ids must not be null"),
        ("public.rerank('q', array(select generate_series(1, 201)::bigint), 5)",
         "chunk_ids must have at most 200 elements"),
        ("public.rerank('q', array[1::bigint], 0)", "top_n must be between 1 and 200"),
        ("public.rerank(null, array[1::bigint], 5)", "query_text must not be null"),
    ],
)  # fmt: skip
def test_rerank_arguments_are_bounded_with_22023(db: str, call: str, message: str) -> None:
    with connect(db) as conn, pytest.raises(psycopg.Error) as caught:
        conn.execute(f"select * from {call}")
    assert caught.value.sqlstate == "22023" and message in str(caught.value)


@pytest.fixture
def scored_by_length(two_tenants: Loaded) -> Loaded:
    with connect(two_tenants.db) as conn:
        conn.execute(BY_LENGTH)
        conn.commit()
    return two_tenants


def test_rerank_orders_the_visible_candidates_and_hides_the_others(
    scored_by_length: Loaded,
) -> None:
    loaded = scored_by_length
    own, other = loaded.chunks["acme"], loaded.chunks["globex"]
    private_other = [c for c in other if c not in loaded.public_chunks]
    candidates = [*own, *private_other]
    with request(loaded.db, "authenticated", claims_for("acme")) as conn:
        rows = conn.execute(
            "select chunk_id, rerank_score, rerank_rank, input_rank"
            " from public.rerank(%s, %s, 200)",
            ("vacation", candidates),
        ).fetchall()
        lengths = dict(
            conn.execute(
                "select id, length(content) from pgrag.chunks where id = any(%s)", (own,)
            ).fetchall()
        )
    assert {r[0] for r in rows} == set(own)  # the other tenant's private chunks: left out
    expected = sorted(own, key=lambda c: (lengths[c], own.index(c)))
    assert [r[0] for r in rows] == expected
    assert [r[2] for r in rows] == list(range(1, len(own) + 1))
    assert all(r[1] == -lengths[r[0]] for r in rows)
    assert all(r[3] == own.index(r[0]) + 1 for r in rows)


def test_rerank_keeps_top_n_and_reads_each_id_once(scored_by_length: Loaded) -> None:
    own = scored_by_length.chunks["acme"]
    with request(scored_by_length.db, "authenticated", claims_for("acme")) as conn:
        rows = conn.execute(
            "select chunk_id from public.rerank('q', %s, 2)", ([*own, *own],)
        ).fetchall()
    assert len(rows) == min(2, len(own)) and len({r[0] for r in rows}) == len(rows)


# -- the PL/Python body ----------------------------------------------------------------------


def rerank_scores_body(conn: psycopg.Connection[Any]) -> Any:
    (found,) = [f for f in plpython_functions(conn, RERANK_SQL) if f.name == "pgrag.rerank_scores"]
    return found


def test_the_stub_and_the_plpython_body_share_one_signature(
    plpy_conn: psycopg.Connection[Any],
) -> None:
    (stub,) = [f for f in stub_functions(RERANK_SQL) if f.name == "pgrag.rerank_scores"]
    body = rerank_scores_body(plpy_conn)
    assert (stub.arguments, stub.returns) == (body.arguments, body.returns)
    assert body.arguments == (("query_text", "text"), ("documents", "text[]"))


def test_plpython_scores_with_the_servers_model(
    plpy: PlpyStub, tiny_cross_encoder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_RERANK_MODEL_PATH", str(tiny_cross_encoder))
    documents = ["The widget listens on port 8443.", "Tomatoes need sun.", ""]
    gd: dict[str, Any] = {}
    scores = run_plpython(
        rerank_scores_body(plpy.conn), plpy, gd, query_text="widget port", documents=documents
    )
    expected = CrossEncoderReranker(str(tiny_cross_encoder)).score("widget port", documents)
    assert scores == pytest.approx(expected, abs=1e-5)
    made = gd[RERANKER_KEY]
    run_plpython(
        rerank_scores_body(plpy.conn), plpy, gd, query_text="again", documents=documents[:1]
    )
    assert gd[RERANKER_KEY] is made and made.threads == 1  # one model per backend


def test_plpython_without_a_configured_model_raises_pr303(
    plpy: PlpyStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGRAG_RERANK_MODEL_PATH", raising=False)
    with pytest.raises(Error) as caught:
        run_plpython(rerank_scores_body(plpy.conn), plpy, {}, query_text="q", documents=["d"])
    assert caught.value.sqlstate == "PR303"
    assert "no re-rank model is configured" in str(caught.value)


def test_plpython_checks_its_arguments_before_loading_a_model(plpy: PlpyStub) -> None:
    gd: dict[str, Any] = {}
    with pytest.raises(SPIError) as caught:
        run_plpython(rerank_scores_body(plpy.conn), plpy, gd, query_text="q", documents=["d"] * 201)
    assert caught.value.sqlstate == "22023" and RERANKER_KEY not in gd


def test_build_context_for_keeps_the_order_given_and_hides_other_tenants(
    two_tenants: Loaded,
) -> None:
    own = two_tenants.chunks["acme"]
    private_other = [c for c in two_tenants.chunks["globex"] if c not in two_tenants.public_chunks]
    given = [*reversed(own), *private_other]
    scores = [float(len(given) - i) for i in range(len(given))]
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        (context, sources) = conn.execute(
            "select context, sources from public.build_context_for(%s, %s, 100000, 50)",
            (given, scores),
        ).fetchone()  # type: ignore[misc]
    firsts = [s["chunk_ids"][0] for s in sources]
    assert firsts == list(reversed(own))  # the order given; globex's chunks left out
    assert [s["score"] for s in sources] == scores[: len(own)]
    assert context.startswith("[Source 1] ") and f"[Source {len(own)}]" in context


def test_build_context_for_keeps_within_its_budget(two_tenants: Loaded) -> None:
    own = two_tenants.chunks["acme"]
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        (sources,) = conn.execute(
            "select sources from public.build_context_for(%s, null, 40, 8)", (own,)
        ).fetchone()  # type: ignore[misc]
    assert sum(s["token_count"] for s in sources) <= 40 and len(sources) < len(own)
