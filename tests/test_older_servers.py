"""PostgreSQL 14-16: every way of installing pgrag works there, as on 17 and later.

``incremental/007`` uses ``ALTER COLUMN ... SET EXPRESSION`` (PostgreSQL 17+); the install engine
runs its older equivalent on earlier servers (pgrag/install/compat.py), in the step itself, so
``pgrag migrate``, the psql bundle and the Supabase files (Supabase projects run PostgreSQL 15) all
install. Checked on Debian's PostgreSQL 15 (the ``pg15_plpython`` fixture); schemas are compared by
``schema_dump``, which leaves out what a server keeps per database (pg_attver).
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from plugins.databases import psql, schema_dump, without_server_bookkeeping
from plugins.pgservers import Pg15Server

from pgrag.install import compat
from pgrag.install.bundle import bundle_sql, write_supabase
from pgrag.install.migrator import Migrator, discover, install_steps

FTS_FILE = "incremental/007-identifier-lexemes.sql"


def _records(dsn: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("select name, kind, sha256 from pgrag.schema_migrations order by name")
        return [(str(n), str(k), str(s)) for n, k, s in rows]


def test_only_the_fts_step_carries_a_form_for_servers_before_17() -> None:
    steps = install_steps(discover())
    for step in steps.work:
        if step.name == FTS_FILE:
            (file,) = step.files
            assert compat.rewrites(FTS_FILE, file.text)
            for written, older in compat.rewrites(FTS_FILE, file.text):
                assert "server_version_num" in step.sql
                assert written in step.sql and older in step.sql
        else:
            assert "server_version_num" not in step.sql


def test_the_replaced_statement_is_in_the_released_file_as_written() -> None:
    (file,) = [f for f in discover() if f.name == FTS_FILE]
    for name, written, _ in compat.BEFORE_17:
        assert name == FTS_FILE and file.text.count(written) == 1


def test_schema_dumps_leave_out_the_column_versions_postgresql_15_keeps() -> None:
    # PostgreSQL 15.20 keeps a version per column in attoptions (pg_attver), different in
    # every database; pg_dump 18 prints it as a column option. Other options stay.
    alter = "ALTER TABLE ONLY pgrag.bm25_backlog ALTER COLUMN chunk_id SET "
    assert without_server_bookkeeping(alter + "(pg_attver=33854464);") is None
    assert without_server_bookkeeping(alter + "(n_distinct=5, pg_attver=1);") == (
        alter + "(n_distinct=5);"
    )
    assert without_server_bookkeeping(alter + "(n_distinct=5);") == alter + "(n_distinct=5);"


def test_migrate_installs_on_postgresql_15(pg15_plpython: Pg15Server) -> None:
    db = pg15_plpython.create_database()
    Migrator(db).migrate()
    assert all(m.state == "applied" for m in Migrator(db).status().migrations)
    with psycopg.connect(db) as conn:
        (expression,) = conn.execute(
            "select pg_get_expr(d.adbin, d.adrelid) from pg_attrdef d join pg_attribute a "
            "on a.attrelid = d.adrelid and a.attnum = d.adnum "
            "where d.adrelid = 'pgrag.chunks'::regclass and a.attname = 'fts'"
        ).fetchone()  # type: ignore[misc]
        assert "chunk_fts" in expression
        (index,) = conn.execute(
            "select indexdef from pg_indexes where indexname = 'chunks_fts_gin'"
        ).fetchone()  # type: ignore[misc]
        assert "gin (fts)" in index


def test_the_bundle_and_the_supabase_files_install_postgresql_15_as_migrate_does(
    pg15_plpython: Pg15Server, tmp_path: Path
) -> None:
    migrated = pg15_plpython.create_database()
    Migrator(migrated).migrate()

    bundled = pg15_plpython.create_database()
    bundle = tmp_path / "pgrag.sql"
    bundle.write_text(bundle_sql(), encoding="utf-8")
    done = psql(bundled, bundle)
    assert done.returncode == 0, done.stderr

    supabase = pg15_plpython.create_database()
    for path in write_supabase(tmp_path / "migrations", vector_schema="public"):
        done = psql(supabase, path)
        assert done.returncode == 0, (path.name, done.stderr)

    expected = schema_dump(migrated)
    for db in (bundled, supabase):
        assert schema_dump(db) == expected
        assert _records(db) == _records(migrated)
        assert Migrator(db).migrate().nothing_to_do
