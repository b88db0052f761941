"""Embeddings wider than pgvector's HNSW limit for vector (2,000 dimensions): up to 4,000.

A database installed with --dims above 2,000 keeps ``chunks.embedding vector(N)`` and every
function's signature; its HNSW graphs index ``embedding::halfvec(N)`` and the walks order by
the same expression, while the distances searches return are those of the full vectors. The
documents are embedded by the local OpenAI-compatible server (3,072 dimensions, as OpenAI's
text-embedding-3-large); the database, the searches and their plans are real.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from plugins.databases import psql
from plugins.openai_server import FakeEmbeddings, expected_embedding
from plugins.pgservers import Pg15Server
from plugins.plans import ANALYZED, marked_plan, run_with_plans, walked_chunk_scans

from pgrag.cli import main
from pgrag.db import connect
from pgrag.errors import ConfigError, MigrationError
from pgrag.ingest import ingest_documents
from pgrag.install.bundle import bundle_sql, supabase_files
from pgrag.install.citus import migrate_citus
from pgrag.install.migrator import Migrator
from pgrag.pipeline.embedders import LocalEmbedder, get_embedder
from pgrag.pipeline.extract import ExtractedDocument
from pgrag.reembed import reembed

WIDE = 3072
LARGE = "text-embedding-3-large"  # 3,072 dimensions natively
HALFVEC_KEY = f"((embedding)::halfvec({WIDE})) halfvec_cosine_ops"
TEXTS = {
    "default/solar.md": "Solar panels produce most of their power around noon in summer.",
    "default/bread.md": "Knead the dough, let it rise overnight, then bake the bread at 230 C.",
    "default/ports.md": "The widget service listens on port 8443 behind the load balancer.",
    "default/tls.md": "Rotate the TLS certificate every ninety days with widgetctl rotate.",
}
ACME = {
    "acme/ports.md": "The acme gateway answers on port 9443 for every partner.",
    "acme/keys.md": "Acme signing keys live in the hardware module, never on disk.",
}


def hnsw_indexes(conn: psycopg.Connection[Any]) -> dict[str, str]:
    rows = conn.execute(
        "select c.relname, pg_get_indexdef(i.indexrelid) from pg_index i "
        "join pg_class c on c.oid = i.indexrelid join pg_am a on a.oid = c.relam "
        "where i.indrelid = 'pgrag.chunks'::regclass and a.amname = 'hnsw'"
    ).fetchall()
    return dict(rows)


def documents(texts: dict[str, str]) -> list[ExtractedDocument]:
    return [ExtractedDocument.from_text(uri, text) for uri, text in texts.items()]


@pytest.fixture
def wide_db(empty_db: str) -> str:
    """A database installed with 3,072-dimension embeddings."""
    assert Migrator(empty_db).migrate(WIDE).dims == WIDE
    return empty_db


@pytest.fixture
def large(openai_embeddings: Callable[..., FakeEmbeddings]) -> FakeEmbeddings:
    return openai_embeddings(WIDE)


@pytest.fixture
def wide_corpus(wide_db: str, large: FakeEmbeddings) -> str:
    """TEXTS in tenant default and ACME in tenant acme, which has a graph of its own."""
    embedder = get_embedder("openai", LARGE)
    assert not ingest_documents(wide_db, documents(TEXTS), embedder=embedder).failures
    summary = ingest_documents(wide_db, documents(ACME), tenant="acme", embedder=embedder)
    assert not summary.failures
    with connect(wide_db, autocommit=True) as conn:
        conn.execute("select pgrag.isolate_tenant('acme')")
    return wide_db


@pytest.fixture
def wconn(wide_corpus: str) -> Iterator[psycopg.Connection[Any]]:
    with connect(wide_corpus) as connection:
        yield connection


def query(text: str) -> Any:
    """The query embedding of a chunk's own text (its nearest chunk is itself)."""
    return expected_embedding(text, WIDE)


# -- install --------------------------------------------------------------------------------------


def test_a_database_installs_with_3072_dimensions_and_halfvec_graphs(wide_db: str) -> None:
    with connect(wide_db) as conn:
        assert conn.execute("select dims from pgrag.embedding_config").fetchone() == (WIDE,)
        assert conn.execute(
            "select format_type(atttypid, atttypmod) from pg_attribute"
            " where attrelid = 'pgrag.chunks'::regclass and attname = 'embedding'"
        ).fetchone() == (f"vector({WIDE})",)
        graphs = hnsw_indexes(conn)
    assert set(graphs) == {"chunks_embedding_hnsw", "chunks_public_embedding_hnsw"}
    assert HALFVEC_KEY in graphs["chunks_embedding_hnsw"]
    assert "WHERE ((embedding IS NOT NULL) AND in_shared_graph)" in graphs["chunks_embedding_hnsw"]
    assert HALFVEC_KEY in graphs["chunks_public_embedding_hnsw"]
    assert "WHERE (is_public AND (embedding IS NOT NULL))" in graphs["chunks_public_embedding_hnsw"]


def test_pgrag_migrate_installs_3072_dimensions_from_the_command_line(empty_db: str) -> None:
    result = CliRunner().invoke(main, ["--dsn", empty_db, "migrate", "--dims", str(WIDE)])
    assert result.exit_code == 0, result.output
    assert "applied incremental/018-wide-embeddings.sql" in result.output
    assert result.output.rstrip().endswith(f"pgrag is installed ({WIDE}-dimension embeddings).")


def test_a_wide_database_installs_on_postgresql_15(pg15_plpython: Pg15Server) -> None:
    dsn = pg15_plpython.create_database()
    assert Migrator(dsn).migrate(WIDE).dims == WIDE
    with connect(dsn) as conn:
        assert HALFVEC_KEY in hnsw_indexes(conn)["chunks_embedding_hnsw"]


def test_a_wide_install_migrates_again_as_a_no_op(wide_db: str) -> None:
    assert Migrator(wide_db).migrate(WIDE).nothing_to_do
    assert Migrator(wide_db).migrate().nothing_to_do


def test_a_narrow_install_keeps_its_vector_graphs(db: str) -> None:
    # The test template was installed with 384 dimensions, through 018 as well.
    with connect(db) as conn:
        graphs = hnsw_indexes(conn)
        assert conn.execute("select dims from pgrag.embedding_config").fetchone() == (384,)
    assert "(embedding vector_cosine_ops)" in graphs["chunks_embedding_hnsw"]


# pgrag's SQL bundle as it was released just before 018-wide-embeddings.sql
# (tests/fixtures/releases/README.md): the schema an upgrade starts from.
BEFORE_WIDE = Path(__file__).parent / "fixtures" / "releases" / "pgrag-5c1a8d0.sql.gz"


@pytest.fixture
def before_wide(tmp_path: Path) -> Callable[[str, int], None]:
    """Installs the release before wide embeddings, at a given dimension, with psql."""

    def install(dsn: str, dims: int) -> None:
        text = gzip.decompress(BEFORE_WIDE.read_bytes()).decode()
        first = "set pgrag.embedding_dims = 384;"
        assert first in text
        path = tmp_path / "before-wide.sql"
        path.write_text(text.replace(first, f"set pgrag.embedding_dims = {dims};", 1))
        psql(dsn, path)

    return install


def test_an_upgrade_keeps_a_narrow_database_as_it_is(
    empty_db: str, before_wide: Callable[[str, int], None]
) -> None:
    before_wide(empty_db, 1536)
    with connect(empty_db) as conn:
        before = hnsw_indexes(conn)
    applied = Migrator(empty_db).migrate().applied
    assert "incremental/018-wide-embeddings.sql" in applied
    with connect(empty_db) as conn:
        assert conn.execute("select dims from pgrag.embedding_config").fetchone() == (1536,)
        assert hnsw_indexes(conn) == before
        # (a switch to a wide model is now allowed)
        assert conn.execute(
            "select pg_get_constraintdef(oid) from pg_constraint"
            " where conname = 'reembeds_dims_check'"
        ).fetchone() == ("CHECK (((dims >= 1) AND (dims <= 4000)))",)


def test_a_database_of_2000_dimensions_with_chunks_is_not_widened(
    empty_db: str, before_wide: Callable[[str, int], None]
) -> None:
    before_wide(empty_db, 2000)
    with connect(empty_db) as conn:
        row = conn.execute(
            "insert into pgrag.documents (tenant_id, source_type, source_uri, status)"
            " values ('default', 'text', 'a.txt', 'ready') returning id"
        ).fetchone()
        conn.execute(
            "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content,"
            " embedding, content_sha256) values ('default', %s, 0, 'a', %s, 'x')",
            (row[0], np.ones(2000, dtype=np.float32)),
        )
        conn.commit()
    with pytest.raises(MigrationError, match="holds 2000-dimension embeddings, not 3072"):
        Migrator(empty_db).migrate(WIDE)
    with connect(empty_db) as conn:
        assert conn.execute("select dims from pgrag.embedding_config").fetchone() == (2000,)


def test_an_installed_database_is_not_widened(db: str) -> None:
    with pytest.raises(ConfigError, match="installed with 384-dimension embeddings, not 3072"):
        Migrator(db).migrate(WIDE)


def test_a_dimension_above_4000_is_refused_before_connecting() -> None:
    result = CliRunner().invoke(
        main, ["--dsn", "postgresql:///nowhere", "migrate", "--dims", "4001"]
    )
    assert result.exit_code == 2
    assert "4001 is not in the range 1<=x<=4000" in result.output


def test_citus_refuses_wide_embeddings_in_one_line() -> None:
    with pytest.raises(ConfigError, match="not supported with --citus"):
        migrate_citus("postgresql:///nowhere", WIDE)


def test_the_psql_bundle_installs_a_wide_database(empty_db: str, tmp_path: Any) -> None:
    path = tmp_path / "pgrag.sql"
    path.write_text(bundle_sql(WIDE), encoding="utf-8")
    done = psql(empty_db, path)
    assert done.returncode == 0, done.stderr
    with connect(empty_db) as conn:
        assert conn.execute("select dims from pgrag.embedding_config").fetchone() == (WIDE,)
        assert HALFVEC_KEY in hnsw_indexes(conn)["chunks_embedding_hnsw"]
    assert Migrator(empty_db).migrate(WIDE).nothing_to_do


def test_the_supabase_files_install_a_wide_database_one_by_one(
    empty_db: str, tmp_path: Any
) -> None:
    with connect(empty_db, autocommit=True) as conn:
        conn.execute("create schema extensions")  # as on Supabase
    # The Supabase CLI runs each file in a session of its own, without psql settings.
    for f in supabase_files(WIDE):
        path = tmp_path / f.name
        path.write_text(f.sql, encoding="utf-8")
        done = psql(empty_db, path)
        assert done.returncode == 0, (f.name, done.stderr)
    with connect(empty_db) as conn:
        assert conn.execute("select dims from pgrag.embedding_config").fetchone() == (WIDE,)
        definition = hnsw_indexes(conn)["chunks_public_embedding_hnsw"]
    assert f"((embedding)::extensions.halfvec({WIDE})) extensions.halfvec_cosine_ops" in definition


# -- ingest and search ----------------------------------------------------------------------------


def test_wide_documents_are_ingested_with_their_full_embeddings(
    wconn: psycopg.Connection[Any],
) -> None:
    rows = wconn.execute("select content, embedding from pgrag.chunks").fetchall()
    assert len(rows) == len(TEXTS) + len(ACME)
    for content, embedding in rows:
        assert embedding.to_numpy().shape == (WIDE,)
        assert float(embedding.to_numpy() @ query(content)) > 0.99999


def test_vector_search_walks_the_halfvec_graph_and_returns_exact_distances(
    wconn: psycopg.Connection[Any],
) -> None:
    text = TEXTS["default/ports.md"]
    rows, plans = run_with_plans(
        wconn,
        "select content, similarity from public.vector_search(%s, 3)",
        (query(text),),
        settings=ANALYZED,
    )
    assert rows[0][0] == text
    (hnsw,) = walked_chunk_scans(marked_plan(plans, "walk_shared"))
    assert hnsw["Index Name"] == "chunks_embedding_hnsw"
    assert hnsw["Order By"].startswith(f"((embedding)::public.halfvec({WIDE}) OPERATOR(public.<=>)")


def test_similarities_are_those_of_the_full_precision_vectors(
    wconn: psycopg.Connection[Any],
) -> None:
    # A query near two chunks, equal to none: a cosine of half-precision copies is off by a few
    # 1e-6 at this size (up to about 1e-5), one of the float32 vectors by about 1e-8.
    q = query(TEXTS["default/ports.md"]) + query(TEXTS["default/tls.md"])
    q = q / np.linalg.norm(q)
    rows = wconn.execute(
        "select content, similarity from public.vector_search(%s, 4)", (q,)
    ).fetchall()
    assert {r[0] for r in rows[:2]} == {TEXTS["default/ports.md"], TEXTS["default/tls.md"]}
    errors = [abs(s - float(query(c).astype(np.float64) @ q.astype(np.float64))) for c, s in rows]
    assert max(errors) < 1e-7, errors


def test_hybrid_search_finds_the_row_through_the_halfvec_graph(
    wconn: psycopg.Connection[Any],
) -> None:
    text = TEXTS["default/bread.md"]
    rows, plans = run_with_plans(
        wconn,
        "select content, vector_score from public.hybrid_search(%s, %s, 3)",
        ("bake the bread", query(text)),
        settings=ANALYZED,
    )
    assert rows[0][0] == text
    (hnsw,) = walked_chunk_scans(marked_plan(plans, "walk_shared"))
    assert hnsw["Index Name"] == "chunks_embedding_hnsw"


def test_an_isolated_tenant_walks_its_own_halfvec_graph(wconn: psycopg.Connection[Any]) -> None:
    own = wconn.execute("select pgrag.tenant_index_name('acme')").fetchone()[0]
    assert HALFVEC_KEY in hnsw_indexes(wconn)[own]
    text = ACME["acme/keys.md"]
    rows, plans = run_with_plans(
        wconn,
        "select content, tenant_id from public.vector_search(%s, 5)",
        (query(text),),
        tenant="acme",
        settings={**ANALYZED, "pgrag.exact_search_max_rows": "0"},
    )
    assert rows[0][0] == text
    assert {r[1] for r in rows} == {"acme"}
    (hnsw,) = walked_chunk_scans(marked_plan(plans, "walk_own"))
    assert hnsw["Index Name"] == own


def test_anon_walks_the_public_halfvec_graph(wconn: psycopg.Connection[Any]) -> None:
    wconn.execute("update pgrag.documents set is_public = true where source_uri like 'default/%'")
    wconn.commit()
    text = TEXTS["default/solar.md"]
    rows, plans = run_with_plans(
        wconn,
        "select content from public.vector_search(%s, 3)",
        (query(text),),
        role="anon",
        settings=ANALYZED,
    )
    assert rows[0][0] == text
    assert not {r[0] for r in rows} & set(ACME.values())
    (hnsw,) = walked_chunk_scans(marked_plan(plans, "walk_public"))
    assert hnsw["Index Name"] == "chunks_public_embedding_hnsw"


def test_a_filtered_search_walks_the_halfvec_graph_in_the_general_walk(
    wconn: psycopg.Connection[Any],
) -> None:
    text = TEXTS["default/tls.md"]
    rows, plans = run_with_plans(
        wconn,
        "select content from public.vector_search(%s, 2, source_types => array['text'])",
        (query(text),),
        tenant="default",
        settings={**ANALYZED, "pgrag.exact_search_max_rows": "0"},
    )
    assert rows[0][0] == text
    scans = walked_chunk_scans(marked_plan(plans, "walk_general"))
    assert [s["Index Name"] for s in scans] == ["chunks_embedding_hnsw"]


# -- model switch ---------------------------------------------------------------------------------


def test_reembed_switches_a_narrow_database_to_a_wide_model(
    db: str, local_embedder: LocalEmbedder, large: FakeEmbeddings
) -> None:
    assert not ingest_documents(db, documents(TEXTS), embedder=local_embedder).failures
    with connect(db, autocommit=True) as conn:
        conn.execute("select pgrag.isolate_tenant('default')")
    reembed(db, get_embedder("openai", LARGE))
    with connect(db) as conn:
        assert conn.execute("select dims, model from pgrag.embedding_config").fetchone() == (
            WIDE,
            LARGE,
        )
        graphs = hnsw_indexes(conn)
        own = conn.execute("select pgrag.tenant_index_name('default')").fetchone()[0]
        assert set(graphs) == {"chunks_embedding_hnsw", "chunks_public_embedding_hnsw", own}
        assert all(HALFVEC_KEY in g for g in graphs.values()), graphs
        text = TEXTS["default/solar.md"]
        rows, plans = run_with_plans(
            conn,
            "select content, similarity from public.vector_search(%s, 2)",
            (query(text),),
            settings=ANALYZED,
        )
    assert rows[0] == (text, pytest.approx(1.0, abs=1e-6))
    (hnsw,) = walked_chunk_scans(marked_plan(plans, "walk_shared"))
    assert hnsw["Index Name"] == "chunks_embedding_hnsw"


def test_reembed_switches_a_wide_database_back_to_the_local_model(
    wide_corpus: str, local_embedder: LocalEmbedder
) -> None:
    reembed(wide_corpus, local_embedder)
    with connect(wide_corpus) as conn:
        assert conn.execute("select dims from pgrag.embedding_config").fetchone() == (384,)
        graphs = hnsw_indexes(conn)
        assert all("(embedding vector_cosine_ops)" in g for g in graphs.values()), graphs
        q = local_embedder.embed([TEXTS["default/bread.md"]])[0]
        rows, plans = run_with_plans(
            conn,
            "select content from public.vector_search(%s, 2)",
            (q,),
            settings=ANALYZED,
        )
    assert rows[0][0] == TEXTS["default/bread.md"]
    (hnsw,) = walked_chunk_scans(marked_plan(plans, "walk_shared"))
    assert hnsw["Order By"] == "(embedding OPERATOR(public.<=>) $1)"
