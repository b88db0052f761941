"""pgrag sql-bundle: installing with psql alone gives the migrator's schema and records, re-runs
are safe, the migrator recognises the result; Supabase migration files; NOTIFY pgrst."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from plugins.databases import psql, schema_dump

from pgrag.cli import main
from pgrag.db import vector_schema
from pgrag.install.bundle import bundle_sql, supabase_files, write_supabase
from pgrag.install.migrator import Migrator, discover, install_steps
from pgrag.testing import create_database, drop_database


def records(dsn: str) -> list[tuple[str, str, str, str]]:
    with psycopg.connect(dsn) as conn:
        return [
            (r[0], r[1], r[2], r[3])
            for r in conn.execute(
                "select name, kind, sha256, version from pgrag.schema_migrations order by name"
            )
        ]


@pytest.fixture
def bundle_file(tmp_path: Path) -> Path:
    path = tmp_path / "pgrag.sql"
    path.write_text(bundle_sql(), encoding="utf-8")
    return path


def test_bundle_gives_the_migrators_schema_and_records(
    pg_admin_dsn: str, empty_db: str, bundle_file: Path
) -> None:
    migrated = create_database(pg_admin_dsn)
    try:
        Migrator(migrated).migrate()
        done = psql(empty_db, bundle_file)
        assert done.returncode == 0, done.stderr

        assert schema_dump(empty_db) == schema_dump(migrated)
        assert records(empty_db) == records(migrated)
    finally:
        drop_database(pg_admin_dsn, migrated)

    # The migrator recognises the bundle-installed database: nothing to apply.
    assert Migrator(empty_db).migrate().nothing_to_do
    assert all(m.state == "applied" for m in Migrator(empty_db).status().migrations)


def test_bundle_twice_is_safe_and_changes_nothing(empty_db: str, bundle_file: Path) -> None:
    first = psql(empty_db, bundle_file)
    assert first.returncode == 0, first.stderr
    dump, applied = schema_dump(empty_db), records(empty_db)

    second = psql(empty_db, bundle_file)

    assert second.returncode == 0, second.stderr
    assert "already applied" in second.stderr
    assert "up to date" in second.stderr
    assert schema_dump(empty_db) == dump
    assert records(empty_db) == applied


def test_bundle_on_a_migrator_installed_database_is_a_no_op(db: str, bundle_file: Path) -> None:
    before = schema_dump(db)

    done = psql(db, bundle_file)

    assert done.returncode == 0, done.stderr
    assert "applied" not in done.stderr.replace("already applied", "")
    assert schema_dump(db) == before


def test_bundle_reapplies_a_missing_idempotent_tier(db: str, bundle_file: Path) -> None:
    before = schema_dump(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("delete from pgrag.schema_migrations where kind = 'idempotent'")

    done = psql(db, bundle_file)

    assert done.returncode == 0, done.stderr
    assert "applied functions, policies and grants" in done.stderr
    assert schema_dump(db) == before
    assert Migrator(db).migrate().nothing_to_do


def test_bundle_completes_a_run_interrupted_before_the_functions_tier(
    db: str, bundle_file: Path
) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "update pgrag.schema_migrations set applied_at = now() "
            "where name = 'incremental/001-core.sql'"
        )

    done = psql(db, bundle_file)

    assert done.returncode == 0, done.stderr
    assert "applied functions, policies and grants" in done.stderr
    assert Migrator(db).status().pending == []


def test_bundle_and_supabase_files_are_the_migrators_steps(tmp_path: Path) -> None:
    steps = install_steps(discover(), 384, "public")
    bundle = bundle_sql(384, "public")
    assert all(s.sql in bundle for s in [*steps.checks, *steps.work])

    supabase = install_steps(discover(), 384, "extensions")
    files = [p.read_text() for p in write_supabase(tmp_path)]
    assert all(supabase.preflight.sql in text for text in files)
    assert [s.sql for s in supabase.work] == [
        next(s.sql for s in supabase.work if s.sql in text) for text in files
    ]


def test_bundle_dimension_setting(empty_db: str, tmp_path: Path) -> None:
    path = tmp_path / "pgrag-768.sql"
    path.write_text(bundle_sql(dims=768), encoding="utf-8")
    assert "set pgrag.embedding_dims = 768;" in path.read_text()

    done = psql(empty_db, path)

    assert done.returncode == 0, done.stderr
    with psycopg.connect(empty_db) as conn:
        assert conn.execute("select dims from pgrag.embedding_config").fetchone() == (768,)
        typ = conn.execute(
            "select format_type(atttypid, atttypmod) from pg_attribute "
            "where attrelid = 'pgrag.chunks'::regclass and attname = 'embedding'"
        ).fetchone()
    assert typ == ("vector(768)",)


def test_bundle_refuses_a_database_installed_with_another_dimension(
    db: str, tmp_path: Path
) -> None:
    path = tmp_path / "pgrag-1536.sql"
    path.write_text(bundle_sql(dims=1536), encoding="utf-8")

    done = psql(db, path)

    assert done.returncode != 0
    assert "installed with 384-dimension embeddings" in done.stderr


def test_bundle_refuses_a_changed_incremental_file(db: str, tmp_path: Path) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "update pgrag.schema_migrations set sha256 = repeat('0', 64) "
            "where name = 'incremental/001-core.sql'"
        )
    path = tmp_path / "pgrag.sql"
    path.write_text(bundle_sql(), encoding="utf-8")

    done = psql(db, path)

    assert done.returncode != 0
    assert "incremental/001-core.sql changed after it was applied" in done.stderr


def test_bundle_notifies_postgrest_when_it_changes_functions(
    empty_db: str, bundle_file: Path
) -> None:
    with psycopg.connect(empty_db, autocommit=True) as listener:
        listener.execute("listen pgrst")
        done = psql(empty_db, bundle_file)
        assert done.returncode == 0, done.stderr
        received = [(n.channel, n.payload) for n in listener.notifies(timeout=5, stop_after=1)]
    assert received == [("pgrst", "reload schema")]


def test_migrate_notifies_postgrest_to_reload_its_schema_cache(empty_db: str) -> None:
    with psycopg.connect(empty_db, autocommit=True) as listener:
        listener.execute("listen pgrst")
        Migrator(empty_db).migrate()
        received = [(n.channel, n.payload) for n in listener.notifies(timeout=5, stop_after=1)]
    assert received == [("pgrst", "reload schema")]


def test_bundle_on_a_server_without_pgvector_stops_first_and_applies_nothing(
    server_without_pgvector: str, bundle_file: Path
) -> None:
    done = psql(server_without_pgvector, bundle_file)

    assert done.returncode != 0
    assert "pgvector extension is not available" in done.stderr
    with psycopg.connect(server_without_pgvector) as conn:
        assert conn.execute("select to_regnamespace('pgrag')").fetchone() == (None,)


# -- Supabase migrations folder ------------------------------------------------------------------


def test_supabase_files_are_timestamped_plain_sql(tmp_path: Path) -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    written = write_supabase(tmp_path, now=now)

    names = [p.name for p in written]
    incremental = [f for f in discover() if f.kind == "incremental"]
    assert len(names) == len(incremental) + 1
    assert names[0] == "20260102030405_pgrag_incremental_001-core.sql"
    assert all(re.fullmatch(r"\d{14}_pgrag_[a-z0-9_.-]+\.sql", n) for n in names), names
    assert names == sorted(names)
    for path in written:
        text = path.read_text()
        # Supabase's CLI is not psql: no meta-commands, no explicit transaction control.
        assert not re.search(r"^\s*\\", text, re.M)
        assert not re.search(r"^\s*(begin|commit)\s*;", text, re.M | re.I)
        if "_pgrag_incremental_" in path.name:
            assert "create extension vector schema %I', 'extensions'" in text

    # Generating again into the same folder adds nothing.
    assert write_supabase(tmp_path, now=now) == []


def test_supabase_files_upgrade_adds_only_what_is_new(tmp_path: Path) -> None:
    existing = [
        "20250101000000_app_tables.sql",
        "20260101000000_pgrag_incremental_001-core.sql",
        "20990101000000_later_user_migration.sql",
    ]
    files = supabase_files(existing=existing, now=datetime(2026, 1, 2, tzinfo=UTC))

    names = [f.name for f in files]
    assert not any(n.endswith("_pgrag_incremental_001-core.sql") for n in names)
    assert names[-1].split("_pgrag_")[1].startswith("idempotent_")
    # Later than anything already in the folder.
    assert all(n > "20990101000000" for n in names), names


def test_supabase_files_install_like_the_migrator(empty_db: str, tmp_path: Path) -> None:
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute("create schema extensions")
        # As on Supabase, where the database's search_path includes extensions.
        dbname = conn.info.dbname
        conn.execute(f'alter database "{dbname}" set search_path = "$user", public, extensions')
    for path in write_supabase(tmp_path / "migrations"):
        done = psql(empty_db, path)
        assert done.returncode == 0, (path.name, done.stderr)

    with psycopg.connect(empty_db) as conn:
        assert vector_schema(conn) == "extensions"
    assert Migrator(empty_db).migrate().nothing_to_do


# -- CLI ------------------------------------------------------------------------------------------


def test_cli_sql_bundle_to_stdout_and_file(tmp_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(main, ["sql-bundle", "--dims", "1536"])
    assert out.exit_code == 0, out.output
    assert "set pgrag.embedding_dims = 1536;" in out.output
    assert "-- incremental/001-core.sql" in out.output

    target = tmp_path / "pgrag.sql"
    written = runner.invoke(main, ["sql-bundle", "-o", str(target)])
    assert written.exit_code == 0, written.output
    assert target.read_text() == bundle_sql()


def test_cli_sql_bundle_supabase(tmp_path: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(main, ["sql-bundle", "--supabase", str(tmp_path)])
    second = runner.invoke(main, ["sql-bundle", "--supabase", str(tmp_path)])

    assert first.exit_code == 0, first.output
    assert first.output.count("wrote ") == len(list(tmp_path.glob("*.sql")))
    assert second.exit_code == 0, second.output
    assert "already holds this version" in second.output


def test_cli_sql_bundle_rejects_bad_dims() -> None:
    result = CliRunner().invoke(main, ["sql-bundle", "--dims", "5000"])
    assert result.exit_code == 2
