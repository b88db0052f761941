"""The migrator: fresh install, idempotent re-runs, checksums, locking, missing pgvector."""

from __future__ import annotations

import json
import re
import shutil
import threading
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from plugins.databases import schema_dump

from pgrag.cli import main
from pgrag.errors import ChecksumMismatch, ConfigError, MigrationError
from pgrag.install.migrator import FILE_NAME, KINDS, Migrator, discover, sql_dir


def test_fresh_install_creates_schema_with_chosen_dimension(empty_db: str) -> None:
    result = Migrator(empty_db).migrate(768)

    assert result.applied == [f.name for f in discover()]
    with psycopg.connect(empty_db) as conn:
        dims = conn.execute("select dims from pgrag.embedding_config").fetchone()
        typ = conn.execute(
            "select format_type(atttypid, atttypmod) from pg_attribute "
            "where attrelid = 'pgrag.chunks'::regclass and attname = 'embedding'"
        ).fetchone()
        indexes = {
            r[0] for r in conn.execute("select indexdef from pg_indexes where schemaname = 'pgrag'")
        }
    assert dims == (768,)
    assert typ == ("vector(768)",)
    assert any(
        "USING hnsw (embedding vector_cosine_ops) "
        "WHERE ((embedding IS NOT NULL) AND in_shared_graph)" in i
        for i in indexes
    )
    assert any("USING gin (fts)" in i for i in indexes)
    assert any("(tenant_id, document_id, chunk_index)" in i for i in indexes)


def test_every_table_has_rls_and_every_tenant_table_keys_on_tenant(db: str) -> None:
    with psycopg.connect(db) as conn:
        tables = conn.execute(
            "select c.oid::regclass::text, c.relrowsecurity from pg_class c "
            "where c.relnamespace = 'pgrag'::regnamespace and c.relkind in ('r', 'p')"
        ).fetchall()
        assert tables, "no tables installed"
        assert [t for t, rls in tables if not rls] == []
        global_tables = {
            "pgrag.embedding_config",
            "pgrag.fetch_allowlist",
            "pgrag.queue_rotation",
            "pgrag.queue_settings",
            "pgrag.model_prices",
            "pgrag.reembeds",
            "pgrag.schema_migrations",
            "pgrag.settings",
            "pgrag.text_search_configs",
        }
        for table, _ in tables:
            if table in global_tables:
                continue
            keys = conn.execute(
                "select conname, pg_get_constraintdef(oid) from pg_constraint "
                "where conrelid = %s::regclass and contype in ('p', 'u', 'f')",
                (table,),
            ).fetchall()
            assert keys, f"{table} has no keys"
            for name, definition in keys:
                assert "tenant_id" in definition, f"{table}.{name} lacks tenant_id: {definition}"


def test_tsvector_follows_content_and_language_on_update(conn: psycopg.Connection) -> None:
    conn.execute(
        "insert into pgrag.documents (tenant_id, id, source_type, source_uri) "
        "values ('t', 1, 'text', 'a.txt')"
    )
    conn.execute(
        "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, content_sha256) "
        "values ('t', 1, 0, 'The running dogs', 'x')"
    )
    assert conn.execute("select fts::text from pgrag.chunks").fetchone() == ("'dog':3 'run':2",)
    conn.execute("update pgrag.chunks set content = 'Die Hunde laufen', language = 'german'")
    assert conn.execute("select fts::text from pgrag.chunks").fetchone() == ("'hund':2 'lauf':3",)


def test_rerunning_migrate_changes_nothing(db: str) -> None:
    before = schema_dump(db)

    result = Migrator(db).migrate()

    assert result.nothing_to_do
    assert schema_dump(db) == before


def test_reapplying_idempotent_tier_leaves_schema_identical(db: str) -> None:
    before = schema_dump(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("delete from pgrag.schema_migrations where kind = 'idempotent'")

    result = Migrator(db).migrate()

    assert result.applied == [f.name for f in discover() if f.kind == "idempotent"]
    assert schema_dump(db) == before


@pytest.fixture
def sql_copy(tmp_path: Path) -> Path:
    """A private copy of sql/ that a test may edit."""
    copy = tmp_path / "sql"
    shutil.copytree(sql_dir(), copy)
    return copy


def test_changed_incremental_file_is_refused_naming_the_file(empty_db: str, sql_copy: Path) -> None:
    Migrator(empty_db, sql_copy).migrate()
    first = sorted((sql_copy / "incremental").glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- an edit after release\n")

    with pytest.raises(ChecksumMismatch, match=re.escape(f"incremental/{first.name} changed")):
        Migrator(empty_db, sql_copy).migrate()


def test_changed_idempotent_file_is_reapplied(empty_db: str, sql_copy: Path) -> None:
    Migrator(empty_db, sql_copy).migrate()
    helpers = sorted((sql_copy / "idempotent").glob("*.sql"))[0]
    helpers.write_text(
        helpers.read_text() + "\ncomment on function pgrag.touch_updated_at() is 'changed';\n"
    )

    result = Migrator(empty_db, sql_copy).migrate()

    assert f"idempotent/{helpers.name}" in result.applied
    with psycopg.connect(empty_db) as conn:
        comment = conn.execute(
            "select obj_description('pgrag.touch_updated_at()'::regprocedure)"
        ).fetchone()
    assert comment == ("changed",)


def test_a_changed_incremental_file_stops_the_run_before_anything_is_applied(
    empty_db: str, sql_copy: Path
) -> None:
    Migrator(empty_db, sql_copy).migrate()
    first = sorted((sql_copy / "incremental").glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- an edit after release\n")
    n = len(list((sql_copy / "incremental").glob("*.sql"))) + 1
    (sql_copy / "incremental" / f"{n:03d}-later.sql").write_text("create table pgrag.later ();\n")

    with pytest.raises(ChecksumMismatch, match="must not be edited"):
        Migrator(empty_db, sql_copy).migrate()

    with psycopg.connect(empty_db) as conn:
        assert conn.execute("select to_regclass('pgrag.later')").fetchone() == (None,)


def test_dry_run_lists_exactly_what_migrate_then_applies(db: str, sql_copy: Path) -> None:
    n = len(list((sql_copy / "incremental").glob("*.sql"))) + 1
    new = sql_copy / "incremental" / f"{n:03d}-probe.sql"
    new.write_text(
        "create table pgrag.probe (id int primary key);\n"
        "alter table pgrag.probe enable row level security;\n"
    )
    tier = [f.name for f in discover(sql_copy) if f.kind == "idempotent"]

    planned = Migrator(db, sql_copy).migrate(dry_run=True)

    # The new table needs the tier's policies and grants: the tier runs after it.
    assert planned.applied == [f"incremental/{new.name}", *tier]
    with psycopg.connect(db) as conn:
        assert conn.execute("select to_regclass('pgrag.probe')").fetchone() == (None,)
    assert Migrator(db, sql_copy).migrate().applied == planned.applied
    assert Migrator(db, sql_copy).migrate(dry_run=True).applied == []


def test_a_run_interrupted_before_the_functions_tier_is_completed_next_time(db: str) -> None:
    # As a crash between the last incremental file and the tier leaves it: an incremental file
    # recorded after the tier. Every engine reads that the same way (the tier is stale).
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "update pgrag.schema_migrations set applied_at = now() "
            "where name = 'incremental/001-core.sql'"
        )
    tier = [f.name for f in discover() if f.kind == "idempotent"]

    status = Migrator(db).status()

    assert {m.file.name: m.state for m in status.pending} == dict.fromkeys(tier, "stale")
    assert Migrator(db).migrate().applied == tier
    assert Migrator(db).status().pending == []


def test_records_of_idempotent_files_no_longer_shipped_go_with_the_next_tier(db: str) -> None:
    # E.g. a file split in two: its old record neither makes the tier stale nor stays behind.
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "insert into pgrag.schema_migrations (name, kind, sha256, applied_at, version) "
            "values ('idempotent/002-gone.sql', 'idempotent', repeat('0', 64), "
            "'2000-01-01', '0.0.1')"
        )
        assert Migrator(db).migrate().nothing_to_do
        conn.execute(
            "delete from pgrag.schema_migrations where name = 'idempotent/001-helpers.sql'"
        )

        Migrator(db).migrate()

        recorded = [
            r[0]
            for r in conn.execute(
                "select name from pgrag.schema_migrations where kind = 'idempotent' order by name"
            )
        ]
    assert recorded == [f.name for f in discover() if f.kind == "idempotent"]


def test_failing_migration_is_rolled_back_whole(empty_db: str, sql_copy: Path) -> None:
    bad = (
        sql_copy
        / "incremental"
        / f"{len(list((sql_copy / 'incremental').glob('*.sql'))) + 1:03d}-bad.sql"
    )
    bad.write_text("create table pgrag.half_done (id int);\nselect 1/0;\n")

    with pytest.raises(MigrationError, match="rolled back: division by zero"):
        Migrator(empty_db, sql_copy).migrate()

    with psycopg.connect(empty_db) as conn:
        assert conn.execute("select to_regclass('pgrag.half_done')").fetchone() == (None,)
        applied = {r[0] for r in conn.execute("select name from pgrag.schema_migrations")}
    assert f"incremental/{bad.name}" not in applied
    assert "incremental/001-core.sql" in applied


def test_concurrent_migrators_serialize_and_apply_each_file_once(empty_db: str) -> None:
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(Migrator(empty_db).migrate().applied)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert sorted(map(len, results)) == [0, len(discover())]


def test_changing_dimension_of_installed_database_is_refused(db: str) -> None:
    with pytest.raises(ConfigError, match="installed with 384-dimension"):
        Migrator(db).migrate(1536)


def test_migration_file_names_follow_the_rule() -> None:
    for kind in KINDS:
        names = sorted(p.name for p in (sql_dir() / kind).glob("*.sql"))
        assert names, f"no {kind} migrations"
        assert all(FILE_NAME.match(n) for n in names), names
        numbers = [int(n[:3]) for n in names]
        if kind == "incremental":  # applied once each, in order: no gaps
            assert numbers == list(range(1, len(names) + 1))
        else:  # re-applied whole: gaps allowed (privileges in the 900 band), no repeats
            assert numbers == sorted(set(numbers))
    # The privileges band comes last in the idempotent tier.
    idempotent = [f.path.name for f in discover() if f.kind == "idempotent"]
    late = [n for n in idempotent if n >= "900"]
    assert late and idempotent[-len(late) :] == late


def test_each_idempotent_file_states_its_contract_and_each_tier_its_rules() -> None:
    for f in discover():
        if f.kind == "idempotent":
            head = f.text.split("\n\n", 1)[0]
            assert "Contract. Provides:" in head and "Relies on:" in head, f.name
    for kind in KINDS:
        assert (sql_dir() / kind / "README.md").is_file(), kind


def test_incremental_numbering_gap_is_rejected(sql_copy: Path) -> None:
    count = len(list((sql_copy / "incremental").glob("*.sql")))
    (sql_copy / "incremental" / f"{count + 2:03d}-skipped-one.sql").write_text("select 1;")

    with pytest.raises(
        MigrationError, match=f"numbering gap in incremental/: expected {count + 1:03d}"
    ):
        discover(sql_copy)


def test_idempotent_tier_may_leave_gaps_but_not_repeat_a_number(sql_copy: Path) -> None:
    (sql_copy / "idempotent" / "800-late.sql").write_text("select 1;")
    assert "idempotent/800-late.sql" in [f.name for f in discover(sql_copy)]

    (sql_copy / "idempotent" / "800-also-late.sql").write_text("select 1;")
    with pytest.raises(MigrationError, match="two migration files numbered 800 in idempotent/"):
        discover(sql_copy)


def test_bad_file_name_is_rejected(sql_copy: Path) -> None:
    (sql_copy / "incremental" / "2-NoNumber.sql").write_text("select 1;")

    with pytest.raises(MigrationError, match="bad migration file name"):
        discover(sql_copy)


# -- through the CLI ------------------------------------------------------------------------------


def test_cli_migrate_twice_reports_nothing_to_apply(empty_db: str) -> None:
    runner = CliRunner()
    first = runner.invoke(main, ["--dsn", empty_db, "migrate"])
    second = runner.invoke(main, ["--dsn", empty_db, "migrate"])

    assert first.exit_code == 0, first.output
    assert "applied incremental/001-core.sql" in first.output
    assert second.exit_code == 0, second.output
    assert second.output.strip() == "Nothing to apply: the database is up to date."


def test_cli_status_json_lists_every_migration_with_checksum(db: str) -> None:
    result = CliRunner().invoke(main, ["--dsn", db, "status", "--json"])

    assert result.exit_code == 0, result.output
    status = json.loads(result.output)
    assert status["up_to_date"] is True
    assert status["pgvector"]["installed"].startswith("0.8")
    assert status["embedding"] == {"dims": 384, "model": None, "provider": None}
    assert [m["name"] for m in status["migrations"]] == [f.name for f in discover()]
    assert all(re.fullmatch(r"[0-9a-f]{64}", m["sha256"]) for m in status["migrations"])
    assert all(m["state"] == "applied" for m in status["migrations"])


def test_cli_dry_run_prints_sql_and_changes_nothing(empty_db: str) -> None:
    result = CliRunner().invoke(main, ["--dsn", empty_db, "migrate", "--dry-run", "--dims", "1536"])

    assert result.exit_code == 0, result.output
    assert "create table pgrag.chunks" in result.output
    assert "set pgrag.embedding_dims = 1536;" in result.output
    with psycopg.connect(empty_db) as conn:
        assert conn.execute("select to_regnamespace('pgrag')").fetchone() == (None,)


def test_cli_unreachable_database_gives_one_line_and_exit_1() -> None:
    result = CliRunner().invoke(
        main, ["--dsn", "postgresql://nobody:secret@127.0.0.1:1/none", "status"]
    )

    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("Error: cannot connect to the database")
    assert "secret" not in result.output


# -- a server without pgvector ---------------------------------------------------------------


def test_server_without_pgvector_gets_one_clear_line_and_nothing_applied(
    server_without_pgvector: str,
) -> None:
    result = CliRunner().invoke(main, ["--dsn", server_without_pgvector, "migrate"])

    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert "pgvector extension is not available" in lines[0]
    assert "install it" in lines[0]
    with psycopg.connect(server_without_pgvector) as conn:
        assert conn.execute("select to_regnamespace('pgrag')").fetchone() == (None,)


def test_pgvector_in_an_extensions_schema_off_the_search_path_works(empty_db: str) -> None:
    """Supabase keeps pgvector in schema ``extensions``; the migrator and clients must follow."""
    import numpy as np

    from pgrag.db import connect

    with psycopg.connect(empty_db, autocommit=True) as admin:
        admin.execute("create schema extensions")
        admin.execute("create extension vector schema extensions")

    Migrator(empty_db).migrate()

    with connect(empty_db) as conn:
        column_type = conn.execute(
            "select format_type(atttypid, atttypmod) from pg_attribute "
            "where attrelid = 'pgrag.chunks'::regclass and attname = 'embedding'"
        ).fetchone()
        roundtrip = conn.execute(
            "select %s::extensions.vector", (np.array([1, 2, 3], dtype=np.float32),)
        ).fetchone()
    assert column_type == ("extensions.vector(384)",)
    assert roundtrip is not None and list(roundtrip[0].to_list()) == [1.0, 2.0, 3.0]


def test_unreachable_database_message_keeps_libpq_reason() -> None:
    result = CliRunner().invoke(main, ["--dsn", "postgresql://nobody@127.0.0.1:1/none", "status"])

    assert result.exit_code == 1
    assert "Connection refused" in result.output
    assert "\t" not in result.output and "?." not in result.output
