"""``pgrag migrate --citus``: pgrag on a Citus coordinator, its tables distributed by tenant.

The incremental and idempotent tiers run first, as for any database (:class:`Migrator`); then
the Citus tier, ``sql/citus/NNN-name.sql``: idempotent files applied together in one
transaction, recorded in ``pgrag.schema_migrations`` as ``citus/NNN-name.sql`` (kind
``idempotent``), and re-applied whenever one of them changed or the other tiers applied anything
(their idempotent tier re-creates the released forms of what the Citus tier replaces). What the
tier does and why: docs/scaling.md and the files' own comments.

On a database whose tables are already distributed, a new version's idempotent tier runs with
``citus.enable_ddl_propagation = off``: it re-creates triggers, policies with subqueries and the
tenant column's default, which Citus refuses on distributed tables (or forwards to the workers
as the text of the whole file); the Citus tier, re-applied right after with propagation on,
re-makes the policies and brings the workers' functions, triggers and grants up to date
(``sql/citus/004-workers.sql``). A new version's incremental files (tables, columns, indexes)
are refused there for now: their DDL must reach the shards, which is not automated yet
(docs/scaling.md). Re-running with nothing new to apply is a no-op.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgrag import __version__
from pgrag.db import connect
from pgrag.errors import ConfigError, MigrationError
from pgrag.migrator import (
    FILE_NAME,
    LOCK_KEY,
    RELOAD_POSTGREST_SQL,
    SECURE_SEARCH_PATH_SQL,
    VECTOR_SCHEMA_TOKEN,
    MigrateResult,
    Migrator,
    quote_ident,
    sql_dir,
)

CITUS_FOLDER = "citus"


@dataclass(frozen=True)
class CitusFile:
    path: Path

    @property
    def name(self) -> str:
        return f"{CITUS_FOLDER}/{self.path.name}"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def render(self, vector_schema: str) -> str:
        """The file's SQL with ``@extschema:vector@`` replaced, as for the other tiers."""
        text = self.path.read_text(encoding="utf-8")
        return text.replace(VECTOR_SCHEMA_TOKEN, quote_ident(vector_schema))


def citus_files(root: Path | None = None) -> list[CitusFile]:
    """The files of ``sql/citus/`` in numeric order (names checked like the other tiers')."""
    folder = (root or sql_dir()) / CITUS_FOLDER
    paths = sorted(p for p in folder.iterdir() if p.suffix == ".sql") if folder.is_dir() else []
    for path in paths:
        if not FILE_NAME.match(path.name):
            raise MigrationError(
                f"bad migration file name {CITUS_FOLDER}/{path.name}: use NNN-lowercase-name.sql"
            )
    return [CitusFile(p) for p in paths]


def _with_options(dsn: str, *settings: str) -> str:
    """``dsn`` with ``-c name=value`` settings added to its ``options`` (or to ``PGOPTIONS``,
    which libpq reads only when the connection string has no ``options``)."""
    existing = conninfo_to_dict(dsn).get("options") or os.environ.get("PGOPTIONS", "")
    extra = " ".join(f"-c {s}" for s in settings)
    return make_conninfo(dsn, options=f"{existing} {extra}".strip())


def _check_citus(conn: psycopg.Connection[Any]) -> bool:
    """Raise unless this is a Citus coordinator; True when pgrag's tables are distributed."""
    row = conn.execute("select extversion from pg_extension where extname = 'citus'").fetchone()
    if row is None:
        raise ConfigError(
            "pgrag migrate --citus needs the citus extension in this database: run it on the "
            "coordinator after create extension citus and citus_add_node for each worker "
            "(docs/scaling.md)."
        )
    row = conn.execute(
        "select to_regclass('pgrag.chunks') is not null and exists ("
        "select 1 from pg_dist_partition where logicalrelid = to_regclass('pgrag.chunks'))"
    ).fetchone()
    return bool(row and row[0])


def migrate_citus(dsn: str, dims: int | None = None, *, dry_run: bool = False) -> MigrateResult:
    """Migrate as :meth:`Migrator.migrate`, then distribute pgrag's tables over Citus."""
    with connect(dsn, autocommit=True) as conn:
        distributed = _check_citus(conn)
    # Trigger DDL on (or distributing) tables with triggers needs enable_unsafe_triggers; on
    # distributed tables the other tiers' DDL stays on the coordinator (see the module).
    # No SET LOCAL propagation: Citus would send the workers the whole text of a file that
    # holds one (a migration file is one query string).
    settings = ["citus.enable_unsafe_triggers=on", "citus.propagate_set_commands=none"]
    if distributed:
        pending = Migrator(dsn).migrate(dims, dry_run=True).applied
        incremental = [name for name in pending if name.startswith("incremental/")]
        if incremental:
            raise MigrationError(
                "pgrag's tables are distributed over Citus and this version adds "
                f"incremental migrations ({', '.join(incremental)}): applying those to a "
                "distributed installation is not automated yet; see docs/scaling.md, "
                "Limits and known differences."
            )
        # The idempotent tier on the coordinator alone; sql/citus/ carries it to the workers.
        settings.append("citus.enable_ddl_propagation=off")
    result = Migrator(_with_options(dsn, *settings)).migrate(dims, dry_run=dry_run)
    files = citus_files()
    # One connection per worker in the Citus step's transaction: Citus refuses schema DDL after
    # a parallel operation (distributing a table) in the same transaction.
    citus_dsn = _with_options(dsn, *settings[:2], "citus.multi_shard_modify_mode=sequential")
    with connect(citus_dsn, autocommit=True) as conn:
        conn.execute("select pg_advisory_lock(%s)", (LOCK_KEY,))
        try:
            records = _recorded(conn)
            stale = (
                bool(result.applied)
                or not distributed
                or any(records.get(f.name) != f.sha256 for f in files)
            )
            if not stale:
                return result
            schema = _vector_schema(conn)
            if dry_run:
                body = "\n".join(f"-- {f.name}\n{f.render(schema)}" for f in files)
                result.statements.append(f"begin;\n{body}\ncommit;")
                result.applied.extend(f.name for f in files)
                return result
            try:
                with conn.transaction():
                    conn.execute(SECURE_SEARCH_PATH_SQL)
                    for f in files:
                        conn.execute(f.render(schema).encode())
                        conn.execute(
                            """
                            insert into pgrag.schema_migrations (name, kind, sha256, version)
                            values (%s, 'idempotent', %s, %s)
                            on conflict (name) do update
                                set sha256 = excluded.sha256, applied_at = now(),
                                    version = excluded.version
                            """,
                            (f.name, f.sha256, __version__),
                        )
                result.applied.extend(f.name for f in files)
                conn.execute(RELOAD_POSTGREST_SQL)
            except psycopg.Error as exc:
                text = str(exc).strip()
                raise MigrationError(
                    "the Citus step failed and was rolled back: "
                    f"{text.splitlines()[0] if text else type(exc).__name__}. The other tiers are "
                    "applied; fix the cause and run pgrag migrate --citus again."
                ) from exc
        finally:
            conn.execute("select pg_advisory_unlock(%s)", (LOCK_KEY,))
    return result


def _recorded(conn: psycopg.Connection[Any]) -> dict[str, str]:
    row = conn.execute("select to_regclass('pgrag.schema_migrations') is not null").fetchone()
    if not (row and row[0]):
        return {}
    rows = conn.execute(
        "select name, sha256 from pgrag.schema_migrations where name like %s",
        (f"{CITUS_FOLDER}/%",),
    ).fetchall()
    return {str(name): str(sha) for name, sha in rows}


def _vector_schema(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute(
        "select n.nspname from pg_extension e join pg_namespace n on n.oid = e.extnamespace "
        "where e.extname = 'vector'"
    ).fetchone()
    return str(row[0]) if row else "public"
