"""The server fixtures of ``plugins/servers.py`` work: one smoke test each.

Each is skipped, with the reason printed, where the machine cannot provide its server (see
the plugin); as root on Debian bookworm they install and build what they need.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from plugins.pgservers import CitusCluster, Pg15Server, Standby


def test_pg15_has_pgvector_and_plpython_importing_from_the_venv(pg15_plpython: Pg15Server) -> None:
    assert pg15_plpython.version.startswith("15.")
    assert pg15_plpython.python == Path("/usr/bin/python3.11")
    # installed after the server started: each new backend starts its own interpreter
    pg15_plpython.venv.install(["iniconfig"])
    with psycopg.connect(pg15_plpython.create_database(), autocommit=True) as conn:
        conn.execute("create extension vector")
        conn.execute("create extension plpython3u")
        (version,) = conn.execute(
            "select extversion from pg_extension where extname = 'vector'"
        ).fetchone()  # type: ignore[misc]
        assert version == "0.8.6"
        (distance,) = conn.execute("select '[1,2,3]'::vector <-> '[1,2,5]'").fetchone()  # type: ignore[misc]
        assert distance == 2.0
        conn.execute(
            """
            create function venv_probe() returns text[] language plpython3u as $$
                import sys
                import iniconfig
                return [iniconfig.__file__, "%d.%d.%d" % sys.version_info[:3]]
            $$
            """
        )
        (module_file, python_version) = conn.execute("select venv_probe()").fetchone()[0]  # type: ignore[index]
    assert Path(module_file).is_relative_to(pg15_plpython.venv.site_packages)
    assert python_version.startswith("3.11.")


@pytest.mark.slow
def test_citus_distributes_a_vector_table_and_routes_a_tenant_query_to_one_worker(
    citus_cluster: CitusCluster,
) -> None:
    assert len(citus_cluster.worker_dsns) == 2
    assert "13.2.2" in citus_cluster.version
    table = f"chunks_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(citus_cluster.coordinator_dsn, autocommit=True) as conn:
        (workers,) = conn.execute("select count(*) from citus_get_active_worker_nodes()").fetchone()  # type: ignore[misc]
        assert workers == 2
        conn.execute(
            f"create table {table} (tenant_id text not null, id bigint not null, "
            "embedding vector(3) not null, primary key (tenant_id, id))"
        )
        conn.execute("select create_distributed_table(%s, 'tenant_id')", (table,))
        conn.execute(f"create index on {table} using hnsw (embedding vector_cosine_ops)")
        rows = [
            (tenant, i, f"[{1 + i % 3},{i % 5},{i % 7 + 1}]")
            for i in range(60)
            for tenant in ("acme", "globex", "initech", "umbrella")
        ]
        with conn.cursor() as cur:
            cur.executemany(f"insert into {table} values (%s, %s, %s::vector)", rows)
        (nodes,) = conn.execute(
            "select count(distinct nodeport) from citus_shards where table_name = %s::regclass",
            (table,),
        ).fetchone()  # type: ignore[misc]
        assert nodes == 2  # shards on both workers
        query = (
            f"select tenant_id, id from {table} where tenant_id = 'globex' "
            "order by embedding <=> '[1,0,1]' limit 5"
        )
        found = conn.execute(query).fetchall()
        assert len(found) == 5 and {t for t, _ in found} == {"globex"}
        plan = "\n".join(r[0] for r in conn.execute(f"explain {query}"))
        assert "Task Count: 1" in plan
        conn.execute(f"drop table {table}")


def test_hot_standby_replays_the_primary_and_refuses_writes(
    replication_primary: str, hot_standby: Callable[[str], Standby]
) -> None:
    standby = hot_standby(replication_primary)
    table = f"replicated_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(replication_primary, autocommit=True) as primary:
        primary.execute(f"create table {table} (id int primary key, note text)")
        primary.execute(f"insert into {table} values (1, 'written on the primary')")
    standby.wait_for_replay(timeout=30)
    with psycopg.connect(standby.dsn, autocommit=True) as conn:
        assert conn.execute("select pg_is_in_recovery()").fetchone() == (True,)
        assert conn.execute(f"select note from {table}").fetchall() == [("written on the primary",)]
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute(f"insert into {table} values (2, 'written on the standby')")


@pytest.mark.parametrize(
    ("root", "no_install", "reason"),
    [(False, "", "the tests do not run as root"), (True, "1", "PGRAG_TEST_NO_INSTALL is set")],
)
def test_a_missing_package_is_a_skip_reason_when_installing_is_not_allowed(
    monkeypatch: pytest.MonkeyPatch, root: bool, no_install: str, reason: str
) -> None:
    from plugins import pgservers

    monkeypatch.setattr(pgservers, "is_root", lambda: root)
    monkeypatch.setenv("PGRAG_TEST_NO_INSTALL", no_install)
    monkeypatch.setattr(pgservers, "installed_packages", lambda packages: {})
    said: list[str] = []
    with pytest.raises(pgservers.ServerUnavailable, match=reason) as caught:
        pgservers.apt_install(pgservers.PLPYTHON_PACKAGES, pgservers.Steps(say=said.append))
    assert "python3.11-venv" in str(caught.value)
    assert said == []  # nothing was attempted


def test_nothing_is_fetched_or_built_without_the_vendored_sources(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from plugins import pgservers

    monkeypatch.setenv("PGRAG_SHARED_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PGRAG_TEST_BUILD_DIR", str(tmp_path / "build"))
    said: list[str] = []
    with pytest.raises(pgservers.ServerUnavailable, match=r"nowhere.* is missing"):
        pgservers.prepare_pg15(pgservers.Steps(say=said.append), "these tests", citus=True)
    assert said == []
    assert not (tmp_path / "build").exists()


def test_postgresql_15_is_not_fetched_with_pgrag_test_no_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from plugins import pgservers

    monkeypatch.setenv("PGRAG_TEST_BUILD_DIR", str(tmp_path / "build"))
    monkeypatch.setenv("PGRAG_TEST_NO_INSTALL", "1")
    said: list[str] = []
    with pytest.raises(pgservers.ServerUnavailable, match="PGRAG_TEST_NO_INSTALL is set"):
        pgservers.ensure_pg15(pgservers.Steps(say=said.append))
    assert said == []


def test_an_install_that_would_upgrade_an_installed_package_is_seen_in_the_dry_run() -> None:
    from plugins.pgservers import upgrades_in

    dry_run = (
        "Inst libpam0g [1.5.2-6+deb12u1] (1.5.2-6+deb12u2 Debian:12.15/oldstable [amd64])\n"
        "Conf libpam0g (1.5.2-6+deb12u2 Debian:12.15/oldstable [amd64])\n"
        "Inst liblz4-dev (1.9.4-1 Debian:12.15/oldstable [amd64])\n"
    )
    assert upgrades_in(dry_run) == ["libpam0g 1.5.2-6+deb12u1 -> 1.5.2-6+deb12u2"]
    assert upgrades_in("Inst liblz4-dev (1.9.4-1 Debian:12.15/oldstable [amd64])\n") == []
