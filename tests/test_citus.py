"""pgrag on Citus: installed by ``pgrag migrate --citus``, the same answers as one server.

The slow tests use the ``citus_cluster`` fixture (a coordinator and two workers of Debian's
PostgreSQL 15 with Citus 13.2.2 and pgvector 0.8.6, on loopback ports) and, as the single
server of the same major version, ``pg15_plpython``. Two tenants, chosen so that their shards
live on different workers, are ingested into both with the real local model (embedded here, in
the test process), in the same order, so ids match; every search function then must return the
same rows with the same scores as the single server, for each tenant through row-level security
(the PostgREST pattern: an API role and claims) and as the owner. The search functions are the
core ones (no Citus-only copies); sql/citus/ distributes the tables, re-makes the policies and
brings the workers up to date.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from plugins.pgservers import CitusCluster, Pg15Server
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgrag.db import connect
from pgrag.errors import MigrationError
from pgrag.ingest import ingest_documents, ingest_paths
from pgrag.install.citus import migrate_citus
from pgrag.install.migrator import Migrator
from pgrag.pipeline.extract import ExtractedDocument

REPO = Path(__file__).resolve().parents[1]
TENANT_CANDIDATES = ("acme", "globex", "initech", "umbrella", "hooli", "wonka", "stark")
AUTHENTICATOR = "pgrag_citus_authenticator"
TENANT_SHARD = re.compile(r"pgrag\.(documents|chunks|bm25_postings|bm25_lexicon|corpus_stats)_\d+")
QUERIES = (
    "what happens when an ingest is killed?",
    "hybrid search weights and fusion",
    "row level security for tenants",
)
# Per tenant: what it ingests (different texts, so results of the two tenants differ).
SOURCES = (REPO / "samples", REPO / "docs" / "supabase.md")

CALLS = {
    "vector_search": "select * from public.vector_search(%(e)s, 8)",
    "keyword_search": "select * from public.keyword_search(%(q)s, 8)",
    "hybrid_search": "select * from public.hybrid_search(%(q)s, %(e)s, 8)",
    "hybrid_search rrf+mmr": (
        "select * from public.hybrid_search(%(q)s, %(e)s, 6, fusion => 'rrf', mmr_lambda => 0.5)"
    ),
    "hybrid_search windows": (
        "select * from public.hybrid_search(%(q)s, %(e)s, 5, window_size => 1)"
    ),
    "chunk_windows": (
        "select * from public.chunk_windows("
        "(select array_agg(chunk_id order by rank) from public.keyword_search(%(q)s, 4)), 1)"
    ),
    "build_context": "select * from public.build_context(%(q)s, %(e)s, 1200, 5, 0.0, 1)",
    "build_context_for": (
        "with h as (select chunk_id, score, rank from public.hybrid_search(%(q)s, %(e)s, 6)) "
        "select * from public.build_context_for((select array_agg(chunk_id order by rank desc) "
        "from h), (select array_agg(score order by rank desc) from h), 1200, 5, 1)"
    ),
}


# --- fast ----------------------------------------------------------------------------------------


def test_migrate_citus_keeps_the_users_pgoptions(monkeypatch: pytest.MonkeyPatch) -> None:
    from psycopg.conninfo import conninfo_to_dict

    from pgrag.install.citus import _with_options

    monkeypatch.setenv("PGOPTIONS", "-c citus.shard_count=8")
    options = conninfo_to_dict(_with_options("dbname=x", "citus.enable_unsafe_triggers=on"))
    assert options["options"] == "-c citus.shard_count=8 -c citus.enable_unsafe_triggers=on"
    given = _with_options("dbname=x options='-c work_mem=64MB'", "a.b=c")
    assert conninfo_to_dict(given)["options"] == "-c work_mem=64MB -c a.b=c"


# --- slow: a coordinator and two workers against one server --------------------------------------


@dataclass
class Installed:
    citus: str  # the coordinator's superuser DSN (database postgres)
    single: str  # superuser DSN of a database on the single PostgreSQL 15 server
    tenants: tuple[str, str]
    ports: dict[str, int]  # tenant -> port of the worker holding its shards
    workers: dict[int, str]  # port -> worker DSN


def _worker_port(conn: psycopg.Connection[Any], tenant: str) -> int:
    row = conn.execute(
        "select nodeport from citus_shards where table_name = 'pgrag.documents'::regclass "
        "and shardid = get_shard_id_for_distribution_column('pgrag.documents', %s::text)",
        (tenant,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _ensure_authenticator(dsn: str) -> None:
    """A PostgREST-like login role, not a superuser, granted the three API roles."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if not conn.execute(
            "select 1 from pg_roles where rolname = %s", (AUTHENTICATOR,)
        ).fetchone():
            conn.execute(
                sql.SQL("create role {} login noinherit").format(sql.Identifier(AUTHENTICATOR))
            )
        conn.execute(
            sql.SQL("grant anon, authenticated, service_role to {}").format(
                sql.Identifier(AUTHENTICATOR)
            )
        )


@pytest.fixture(scope="module")
def installed(
    citus_cluster: CitusCluster, pg15_plpython: Pg15Server, local_embedder: Any
) -> Installed:
    citus = citus_cluster.coordinator_dsn
    single = pg15_plpython.create_database()
    migrate_citus(citus)
    Migrator(single).migrate()
    with psycopg.connect(citus, autocommit=True) as conn:
        ports = {t: _worker_port(conn, t) for t in TENANT_CANDIDATES}
    first = TENANT_CANDIDATES[0]
    second = next(t for t in TENANT_CANDIDATES if ports[t] != ports[first])
    tenants = (first, second)
    for dsn in (single, citus):
        _ensure_authenticator(dsn)
        for tenant, source in zip(tenants, SOURCES, strict=True):
            summary = ingest_paths(dsn, [str(source)], tenant=tenant, embedder=local_embedder)
            assert not summary.failures
    workers = {w.port: w.dsn() for w in citus_cluster.workers}
    return Installed(citus, single, tenants, {t: ports[t] for t in tenants}, workers)


@contextmanager
def as_api_role(
    dsn: str, role: str, tenant: str | None, *, propagate: bool = True
) -> Iterator[psycopg.Connection[Any]]:
    """A PostgREST-style request: the authenticator switches to ``role`` with the claims; on
    the coordinator the db-pre-request hook pgrag.propagate_request_claims() runs first."""
    with connect(make_conninfo(dsn, user=AUTHENTICATOR)) as conn:
        conn.execute(sql.SQL("set local role {}").format(sql.Identifier(role)))
        claims = {"role": role, **({"tenant_id": tenant} if tenant else {})}
        conn.execute("select set_config('request.jwt.claims', %s, true)", (json.dumps(claims),))
        if propagate:  # (a no-op on the single server)
            conn.execute("select pgrag.propagate_request_claims()")
        yield conn
        conn.rollback()


@contextmanager
def as_owner(dsn: str, tenant: str) -> Iterator[psycopg.Connection[Any]]:
    """The CLI's way: the database owner acting as ``tenant`` (pgrag.set_request_tenant)."""
    with connect(dsn) as conn:
        conn.execute("select pgrag.set_request_tenant(%s)", (tenant,))
        yield conn
        conn.rollback()


def _same(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> bool:
    """Rows equal; floats within 1e-12 (BM25 sums may add in another order)."""

    def close(x: Any, y: Any) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12)
        if isinstance(x, list | tuple) and isinstance(y, list | tuple):
            return len(x) == len(y) and all(close(i, j) for i, j in zip(x, y, strict=True))
        if isinstance(x, dict) and isinstance(y, dict):
            return x.keys() == y.keys() and all(close(x[k], y[k]) for k in x)
        return bool(x == y)

    return close(a, b)


@pytest.mark.slow
def test_tables_are_distributed_by_tenant_and_co_located(installed: Installed) -> None:
    with psycopg.connect(installed.citus) as conn:
        rows = dict(
            conn.execute(
                "select logicalrelid::regclass::text, partmethod::text || ':' || colocationid "
                "from pg_dist_partition where logicalrelid::regclass::text like 'pgrag.%'"
            ).fetchall()
        )
    tenant_tables = ["pgrag.documents", "pgrag.chunks", "pgrag.bm25_postings"]
    tenant_tables += ["pgrag.bm25_lexicon", "pgrag.corpus_stats", "pgrag.query_embeddings"]
    tenant_tables += ["pgrag.chunk_embeddings_next", "pgrag.token_usage", "pgrag.search_log"]
    assert {rows[t] for t in tenant_tables} == {rows["pgrag.documents"]}  # one co-location group
    assert rows["pgrag.documents"].startswith("h:")  # hash-distributed
    assert rows["pgrag.embedding_config"].startswith("n:")  # reference tables
    assert rows["pgrag.text_search_configs"].startswith("n:")
    for table in ("pgrag.settings", "pgrag.model_prices", "pgrag.reembeds"):  # global ones
        assert rows[table].startswith("n:"), table
    assert "pgrag.schema_migrations" not in rows  # the coordinator's own


@pytest.mark.slow
def test_the_two_tenants_live_on_different_workers(installed: Installed) -> None:
    a, b = installed.tenants
    assert installed.ports[a] != installed.ports[b]
    with psycopg.connect(installed.citus) as conn:
        shard = {
            t: conn.execute(
                "select get_shard_id_for_distribution_column('pgrag.chunks', %s::text)", (t,)
            ).fetchone()[0]  # type: ignore[index]
            for t in (a, b)
        }
    for tenant in (a, b):
        # the chunks, read on the worker itself, in the tenant's shard there
        with psycopg.connect(installed.workers[installed.ports[tenant]]) as worker:
            (n,) = worker.execute(
                sql.SQL("select count(*) from pgrag.{} where tenant_id = %s").format(
                    sql.Identifier(f"chunks_{shard[tenant]}")
                ),
                (tenant,),
            ).fetchone()  # type: ignore[misc]
            assert n > 0


@pytest.mark.slow
def test_every_search_function_returns_what_the_single_server_returns(
    installed: Installed, local_embedder: Any
) -> None:
    compared = 0
    for q in QUERIES:
        e = local_embedder.embed([q])[0]
        for name, call in CALLS.items():
            for tenant in installed.tenants:
                for how in ("authenticated", "owner"):
                    got = {}
                    for server in (installed.single, installed.citus):
                        session = (
                            as_api_role(server, "authenticated", tenant)
                            if how == "authenticated"
                            else as_owner(server, tenant)
                        )
                        with session as conn:
                            got[server] = conn.execute(call, {"q": q, "e": e}).fetchall()
                    single, citus = got[installed.single], got[installed.citus]
                    assert single, f"{name} found nothing for {tenant} ({q!r})"
                    assert _same(single, citus), f"{name} as {how} of {tenant} for {q!r}"
                    compared += 1
    assert compared == len(QUERIES) * len(CALLS) * 2 * 2


@pytest.mark.slow
def test_the_query_embedding_cache_keeps_a_tenants_entries_on_its_worker(
    installed: Installed, local_embedder: Any
) -> None:
    """incremental/008's table, distributed by tenant: its SQL writers work through RLS."""
    a, b = installed.tenants
    e = local_embedder.embed([QUERIES[0]])[0]
    model = local_embedder.model_name  # the cache keeps the installation's model alone
    with as_api_role(installed.citus, "authenticated", a) as conn:
        put = "select pgrag.query_cache_put(%s, %s, %s)"
        assert conn.execute(put, (model, QUERIES[0], e)).fetchone() == (True,)
        (cached,) = conn.execute(
            "select pgrag.query_cache_get(%s, %s)::text", (model, QUERIES[0])
        ).fetchone()  # type: ignore[misc]
        assert cached == conn.execute("select %s::vector::text", (e,)).fetchone()[0]  # type: ignore[index]
        shard = conn.execute(
            "select get_shard_id_for_distribution_column('pgrag.query_embeddings', %s::text)",
            (a,),
        ).fetchone()
        conn.commit()
    try:
        with psycopg.connect(installed.workers[installed.ports[a]]) as worker:
            (n,) = worker.execute(
                sql.SQL("select count(*) from pgrag.{} where tenant_id = %s").format(
                    sql.Identifier(f"query_embeddings_{shard[0]}")  # type: ignore[index]
                ),
                (a,),
            ).fetchone()  # type: ignore[misc]
            assert n == 1
        with as_api_role(installed.citus, "authenticated", b) as conn:
            got = conn.execute("select pgrag.query_cache_get(%s, %s)", (model, QUERIES[0]))
            assert got.fetchone() == (None,)
    finally:
        with psycopg.connect(installed.citus, autocommit=True) as conn:
            conn.execute("delete from pgrag.query_embeddings where tenant_id = any(%s)", ([a, b],))


@pytest.mark.slow
def test_usage_and_the_search_log_are_written_on_the_tenants_worker(installed: Installed) -> None:
    """incremental/010's tables: record_usage (the owner's, as the CLI) and log_search (a
    tenant's, through RLS, with the operator's setting read from the reference table)."""
    a, b = installed.tenants
    with psycopg.connect(installed.citus, autocommit=True) as conn:
        conn.execute("update pgrag.settings set search_log = true")
    try:
        with as_owner(installed.citus, a) as conn:
            conn.execute("select pgrag.record_usage('query', 'local', 'm', 7)")
            conn.execute("select pgrag.record_usage('query', 'local', 'm', 5)")
            conn.commit()
        with as_api_role(installed.citus, "authenticated", a) as conn:
            logged = conn.execute("select public.log_search('hybrid', 12.5, 3, 0.9)").fetchone()
            assert logged == (True,)
            conn.commit()
        with as_api_role(installed.citus, "authenticated", a) as conn:
            assert conn.execute(
                "select sum(input_tokens)::int, sum(requests)::int from pgrag.token_usage "
                "where model = 'm'"
            ).fetchone() == (12, 2)
            assert conn.execute("select mode, row_count from pgrag.search_log").fetchall() == [
                ("hybrid", 3)
            ]
        with as_api_role(installed.citus, "authenticated", b) as conn:
            assert conn.execute("select count(*) from pgrag.search_log").fetchone() == (0,)
            assert conn.execute(
                "select count(*) from pgrag.token_usage where model = 'm'"
            ).fetchone() == (0,)
        with psycopg.connect(installed.workers[installed.ports[a]]) as worker:
            for table in ("token_usage", "search_log"):
                (shard,) = worker.execute(
                    "select get_shard_id_for_distribution_column(%s, %s::text)",
                    (f"pgrag.{table}", a),
                ).fetchone()  # type: ignore[misc]
                (n,) = worker.execute(
                    sql.SQL("select count(*) from pgrag.{} where tenant_id = %s").format(
                        sql.Identifier(f"{table}_{shard}")
                    ),
                    (a,),
                ).fetchone()  # type: ignore[misc]
                assert n > 0, table
    finally:
        with psycopg.connect(installed.citus, autocommit=True) as conn:
            conn.execute("update pgrag.settings set search_log = false")
            conn.execute("delete from pgrag.search_log")
            conn.execute("delete from pgrag.token_usage where model = 'm'")


@pytest.mark.slow
def test_a_tenant_inserts_rows_whose_ids_the_coordinator_draws_but_chooses_none(
    installed: Installed,
) -> None:
    """Citus sends the shard the id it drew; the tenant still may not give one."""
    a = installed.tenants[0]
    insert = (
        "insert into pgrag.documents (tenant_id, source_type, source_uri) "
        "values (%s, 'text', 'by-the-tenant') returning id"
    )
    for server in (installed.single, installed.citus):
        with as_api_role(server, "authenticated", a) as conn:
            assert conn.execute(insert, (a,)).fetchone() is not None
        with (
            as_api_role(server, "authenticated", a) as conn,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            conn.execute(
                "insert into pgrag.documents (tenant_id, id, source_type, source_uri) "
                "values (%s, 999999, 'text', 'chosen-id')",
                (a,),
            )


@pytest.mark.slow
def test_row_level_security_keeps_tenants_apart_on_the_workers(installed: Installed) -> None:
    a, b = installed.tenants
    tables = ["documents", "chunks", "bm25_postings", "bm25_lexicon", "corpus_stats"]
    for server in (installed.single, installed.citus):
        counts = {}
        with psycopg.connect(server) as conn:
            for t in tables:
                counts[t] = dict(
                    conn.execute(
                        sql.SQL("select tenant_id, count(*) from pgrag.{} group by 1").format(
                            sql.Identifier(t)
                        )
                    ).fetchall()
                )
        for tenant, other in ((a, b), (b, a)):
            with as_api_role(server, "authenticated", tenant) as conn:
                for t in tables:
                    seen = dict(
                        conn.execute(
                            sql.SQL("select tenant_id, count(*) from pgrag.{} group by 1").format(
                                sql.Identifier(t)
                            )
                        ).fetchall()
                    )
                    assert seen == {tenant: counts[t][tenant]}, (server, t)
                    # asking for the other tenant by name finds nothing either
                    (n,) = conn.execute(
                        sql.SQL("select count(*) from pgrag.{} where tenant_id = %s").format(
                            sql.Identifier(t)
                        ),
                        (other,),
                    ).fetchone()  # type: ignore[misc]
                    assert n == 0
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(
                        "insert into pgrag.documents (tenant_id, source_type, source_uri) "
                        "values (%s, 'text', 'forged')",
                        (other,),
                    )
        with as_api_role(server, "anon", None) as conn:
            (n,) = conn.execute("select count(*) from pgrag.chunks").fetchone()  # type: ignore[misc]
            assert n == 0  # nothing is public
    # Claims set with set_config() alone stay on the coordinator: the workers see no tenant and
    # return nothing (closed, not open) until pgrag.propagate_request_claims() sets them again.
    with as_api_role(installed.citus, "authenticated", a, propagate=False) as conn:
        (n,) = conn.execute("select count(*) from pgrag.chunks").fetchone()  # type: ignore[misc]
        assert n == 0


@pytest.mark.slow
def test_a_search_without_a_tenant_finds_every_tenants_rows_as_on_one_server(
    installed: Installed, local_embedder: Any
) -> None:
    # The owner without claims (psql, as in the README) searches every tenant: each shard's
    # rows, and the keyword arm's full scan over both tenants' postings.
    q = QUERIES[0]
    e = local_embedder.embed([q])[0]
    for name in ("vector_search", "keyword_search", "hybrid_search"):
        got = []
        for server in (installed.single, installed.citus):
            with connect(server) as conn:
                got.append(conn.execute(CALLS[name], {"q": q, "e": e}).fetchall())
        assert got[0] and _same(got[0], got[1]), name
        assert {row[-1] for row in got[1]} == set(installed.tenants), name


@pytest.mark.slow
def test_anon_finds_the_public_documents_of_every_tenant_as_on_one_server(
    installed: Installed, local_embedder: Any
) -> None:
    publish = (
        "update pgrag.documents set is_public = %s "
        "where source_uri like '%%/samples/ingestion.md' or source_uri like '%%/supabase.md'"
    )
    for dsn in (installed.single, installed.citus):
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute(publish, (True,)).rowcount == 1 + 1  # one per tenant
    try:
        for q in QUERIES[:1]:  # (each call reads every shard: about a second on the test cluster)
            e = local_embedder.embed([q])[0]
            for name in ("vector_search", "keyword_search", "hybrid_search", "build_context"):
                got = []
                for server in (installed.single, installed.citus):
                    with as_api_role(server, "anon", None) as conn:
                        got.append(conn.execute(CALLS[name], {"q": q, "e": e}).fetchall())
                # (anon reads no BM25 statistics: its keyword arm finds nothing, on both)
                assert (bool(got[0]) or name == "keyword_search") and _same(got[0], got[1]), (
                    name,
                    q,
                )
                if name != "build_context":
                    assert {row[-1] for row in got[1]} <= set(installed.tenants)
    finally:
        for dsn in (installed.single, installed.citus):
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(publish, (False,))


@pytest.mark.slow
def test_a_tenants_search_reaches_only_its_worker(
    installed: Installed, local_embedder: Any
) -> None:
    e = local_embedder.embed([QUERIES[0]])[0]
    for tenant in installed.tenants:
        with as_api_role(installed.citus, "authenticated", tenant) as conn:
            plan = "\n".join(
                r[0]
                for r in conn.execute(
                    "explain select count(*) from pgrag.chunks where tenant_id = %s", (tenant,)
                )
            )
            assert "Task Count: 1" in plan
            # (port, command) of every command the coordinator sends
            sent: list[tuple[int, str]] = []

            def note(d: psycopg.errors.Diagnostic, sent: list[tuple[int, str]] = sent) -> None:
                port = re.search(r"on server \S+@[^:\s]+:(\d+)", d.message_detail or "")
                if port:
                    sent.append((int(port.group(1)), d.message_primary or ""))

            conn.add_notice_handler(note)
            conn.execute("set local citus.log_remote_commands = on")
            for name, call in CALLS.items():
                sent.clear()
                conn.execute(call, {"q": QUERIES[0], "e": e}).fetchall()
                # Commands on shards of the tenant tables (reference tables such as
                # embedding_config have a copy on every node, read from any of them).
                ports = {port for port, command in sent if TENANT_SHARD.search(command)}
                assert ports == {installed.ports[tenant]}, (tenant, name, sent)


@pytest.mark.slow
def test_isolating_a_tenant_builds_its_hnsw_graph_in_its_shard(installed: Installed) -> None:
    tenant = installed.tenants[1]
    with psycopg.connect(installed.citus, autocommit=True) as conn:
        (index,) = conn.execute("select pgrag.isolate_tenant(%s)::text", (tenant,)).fetchone()  # type: ignore[misc]
        (shard,) = conn.execute(
            "select get_shard_id_for_distribution_column('pgrag.chunks', %s::text)", (tenant,)
        ).fetchone()  # type: ignore[misc]
    name = index.split(".")[1]
    with psycopg.connect(installed.workers[installed.ports[tenant]]) as worker:
        worker.execute("set citus.override_table_visibility = off")  # show the shards
        found = worker.execute(
            "select indexdef from pg_indexes where schemaname = 'pgrag' and tablename = %s "
            "and indexname like %s",
            (f"chunks_{shard}", f"{name}%"),
        ).fetchall()
    with psycopg.connect(installed.citus) as conn:
        (key,) = conn.execute("select hashtextextended(%s, 0)", (tenant,)).fetchone()  # type: ignore[misc]
    # The shard's index is the tenant's: its predicate states the tenant's key, not its id.
    assert len(found) == 1 and "hnsw" in found[0][0] and f"= '{key}'::bigint)" in found[0][0]
    assert repr(tenant) not in found[0][0]
    with psycopg.connect(installed.citus, autocommit=True) as conn:
        assert conn.execute("select pgrag.share_tenant(%s)", (tenant,)).fetchone() == (True,)


@pytest.mark.slow
def test_migrate_citus_again_changes_nothing(installed: Installed) -> None:
    assert migrate_citus(installed.citus).applied == []


@pytest.mark.slow
def test_changing_and_deleting_documents_keeps_bm25_equal_to_the_single_server(
    installed: Installed, local_embedder: Any
) -> None:
    a = installed.tenants[0]
    changed = REPO / "samples" / "ingestion.md"
    removed = REPO / "samples" / "getting-started.md"
    text = changed.read_text() + "\n\nA killed ingest leaves no half document: run it again.\n"
    doc = ExtractedDocument.from_text(str(changed), text, title="Ingestion", source_type="markdown")
    stats = (
        "select (select count(*) from pgrag.chunks where tenant_id = %(t)s), "
        "(select count(*) from pgrag.bm25_postings where tenant_id = %(t)s), "
        "(select sum(df) from pgrag.bm25_lexicon where tenant_id = %(t)s), "
        "(select sum(chunk_count) from pgrag.corpus_stats where tenant_id = %(t)s), "
        "(select sum(token_count) from pgrag.corpus_stats where tenant_id = %(t)s)"
    )
    seen = []
    for dsn in (installed.single, installed.citus):
        summary = ingest_documents(dsn, [doc], tenant=a, embedder=local_embedder)
        assert summary.documents_changed == 1 and summary.chunks_reused > 0
        with as_owner(dsn, a) as conn:
            deleted = conn.execute(
                "select * from pgrag.delete_documents(source_uris => %s)", ([str(removed)],)
            ).fetchall()
            assert len(deleted) == 1
            conn.commit()
        with psycopg.connect(dsn) as conn:
            seen.append(conn.execute(stats, {"t": a}).fetchone())
    assert seen[0] == seen[1]
    e = local_embedder.embed([QUERIES[0]])[0]
    for name in ("keyword_search", "hybrid_search"):
        got = []
        for server in (installed.single, installed.citus):
            with as_api_role(server, "authenticated", a) as conn:
                got.append(conn.execute(CALLS[name], {"q": QUERIES[0], "e": e}).fetchall())
        assert _same(got[0], got[1]), name


@pytest.mark.slow
def test_an_upgrade_of_the_idempotent_tier_reaches_the_workers(
    installed: Installed, local_embedder: Any
) -> None:
    a, b = installed.tenants
    worker = installed.workers[installed.ports[a]]
    body = "select prosrc from pg_proc where oid = 'pgrag.tenant_index_name(text)'::regprocedure"
    # A worker whose copy of a function is out of date, as after a release changed it.
    with psycopg.connect(worker, autocommit=True) as conn:
        conn.execute("set citus.enable_ddl_propagation = off")
        conn.execute(
            "create or replace function pgrag.tenant_index_name(tenant text) returns text "
            "language sql immutable security invoker parallel safe "
            "set search_path = pg_catalog, pg_temp as $$ select 'stale' $$"
        )
    with psycopg.connect(installed.citus, autocommit=True) as conn:
        conn.execute(
            "update pgrag.schema_migrations set sha256 = 'older' where kind = 'idempotent'"
        )
    applied = migrate_citus(installed.citus).applied
    assert [n for n in applied if n.startswith("idempotent/")] == [
        f.name for f in Migrator(installed.citus).files if f.kind == "idempotent"
    ]
    assert "citus/003-workers.sql" in applied
    with psycopg.connect(installed.citus) as coordinator, psycopg.connect(worker) as conn:
        assert conn.execute(body).fetchone() == coordinator.execute(body).fetchone()
    # Searches, RLS and the BM25 triggers on the workers still agree with the single server.
    extra = REPO / "samples" / "release-process.md"
    for dsn in (installed.single, installed.citus):
        summary = ingest_paths(dsn, [str(extra)], tenant=b, embedder=local_embedder)
        assert summary.documents_new == 1
    e = local_embedder.embed([QUERIES[0]])[0]
    for tenant in installed.tenants:
        for name in ("keyword_search", "hybrid_search", "build_context"):
            got = []
            for server in (installed.single, installed.citus):
                with as_api_role(server, "authenticated", tenant) as conn:
                    got.append(conn.execute(CALLS[name], {"q": QUERIES[0], "e": e}).fetchall())
            assert _same(got[0], got[1]), (tenant, name)
    with as_api_role(installed.citus, "authenticated", a) as conn:
        seen = conn.execute("select distinct tenant_id from pgrag.documents").fetchall()
        assert seen == [(a,)]
    assert migrate_citus(installed.citus).applied == []


@pytest.mark.slow
def test_a_migrate_without_citus_is_refused_before_anything_runs(installed: Installed) -> None:
    with psycopg.connect(installed.citus) as conn:
        before = conn.execute("select * from pgrag.schema_migrations order by name").fetchall()
    with pytest.raises(MigrationError, match=r"distributed over Citus.*migrate --citus"):
        Migrator(installed.citus).migrate()
    with psycopg.connect(installed.citus) as conn:
        after = conn.execute("select * from pgrag.schema_migrations order by name").fetchall()
    assert after == before


@pytest.mark.slow
def test_new_incremental_files_are_refused_on_distributed_tables(installed: Installed) -> None:
    name = "incremental/007-identifier-lexemes.sql"
    with psycopg.connect(installed.citus, autocommit=True) as conn:
        row = conn.execute(
            "delete from pgrag.schema_migrations where name = %s "
            "returning name, kind, sha256, applied_at, version",
            (name,),
        ).fetchone()
        assert row is not None
        try:
            with pytest.raises(MigrationError, match="not automated yet"):
                migrate_citus(installed.citus)
        finally:
            conn.execute("insert into pgrag.schema_migrations values (%s, %s, %s, %s, %s)", row)
    assert migrate_citus(installed.citus).applied == []


def test_a_switch_to_a_wide_model_is_refused_on_distributed_tables(installed: Installed) -> None:
    # Embeddings above 2,000 dimensions (halfvec graphs) are not supported on Citus: the
    # re-embed stops before it adds a column, in one line.
    with (
        connect(installed.citus) as conn,
        pytest.raises(psycopg.errors.FeatureNotSupported, match="not supported on Citus"),
    ):
        conn.execute("select * from pgrag.reembed_start('text-embedding-3-large', 'openai', 3072)")
    with connect(installed.citus) as conn:
        assert conn.execute("select count(*) from pgrag.reembeds").fetchone() == (0,)
