"""Apply pgrag's versioned SQL: numbered, checksummed, one transaction each, serialized by a lock.

Two tiers live under ``sql/``:

* ``incremental/NNN-name.sql`` — tables, columns, indexes. Applied once each, in order, each in
  its own transaction, and recorded with its SHA-256. Changing an applied file is an error.
* ``idempotent/NNN-name.sql`` — functions, triggers, policies, grants (``CREATE OR REPLACE``).
  Re-applied together, in one transaction, whenever any of them changed or any incremental
  migration was applied.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import psycopg

from pgrag import __version__, compat
from pgrag.db import connect
from pgrag.errors import ChecksumMismatch, ConfigError, MigrationError, PgvectorMissing

Kind = Literal["incremental", "idempotent"]
KINDS: tuple[Kind, ...] = ("incremental", "idempotent")
FILE_NAME = re.compile(r"^\d{3}-[a-z][a-z0-9_-]*\.sql$")
DEFAULT_DIMS = 384
MAX_DIMS = 2000  # pgvector's HNSW limit for the vector type
# One advisory lock key for every pgrag migrator ("pgrag" in ASCII, then 1).
LOCK_KEY = 0x7067726167_01

VECTOR_SCHEMA_TOKEN = "@extschema:vector@"
# Each migration transaction resolves names in pg_catalog only: no caller schema can hijack DDL.
SECURE_SEARCH_PATH_SQL = "select pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)"

RELOAD_POSTGREST_SQL = "notify pgrst, 'reload schema';"


def sql_dir() -> Path:
    """The folder holding ``incremental/`` and ``idempotent/`` (in the wheel or the checkout)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "sql", here.parent / "sql"):
        if (candidate / "incremental").is_dir():
            return candidate
    raise MigrationError(
        f"pgrag's SQL files are missing (looked in {here / 'sql'}); reinstall pgrag."
    )


@dataclass(frozen=True)
class MigrationFile:
    """One SQL file of one tier."""

    kind: Kind
    path: Path

    @property
    def name(self) -> str:
        return f"{self.kind}/{self.path.name}"

    @property
    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def render(self, vector_schema: str) -> str:
        """The file's SQL with ``@extschema:vector@`` replaced by pgvector's (quoted) schema."""
        return self.text.replace(VECTOR_SCHEMA_TOKEN, quote_ident(vector_schema))


def quote_ident(name: str) -> str:
    """Quote ``name`` as an SQL identifier when it needs quoting."""
    if re.fullmatch(r"[a-z_][a-z0-9_$]*", name):
        return name
    return '"' + name.replace('"', '""') + '"'


def discover(root: Path | None = None) -> list[MigrationFile]:
    """All migration files, incremental first, each tier in numeric order; names are checked."""
    root = root or sql_dir()
    files: list[MigrationFile] = []
    for kind in KINDS:
        folder = root / kind
        paths = sorted(p for p in folder.iterdir() if p.suffix == ".sql") if folder.is_dir() else []
        for expected, path in enumerate(paths, start=1):
            if not FILE_NAME.match(path.name):
                raise MigrationError(
                    f"bad migration file name {kind}/{path.name}: use NNN-lowercase-name.sql"
                )
            if int(path.name[:3]) != expected:
                raise MigrationError(
                    f"migration numbering gap in {kind}/: expected {expected:03d}, "
                    f"found {path.name}"
                )
            files.append(MigrationFile(kind, path))
    return files


@dataclass(frozen=True)
class AppliedRecord:
    name: str
    kind: str
    sha256: str
    applied_at: datetime
    version: str


@dataclass
class MigrationState:
    """A file and what the database knows of it: applied, pending, or changed."""

    file: MigrationFile
    record: AppliedRecord | None

    @property
    def state(self) -> str:
        if self.record is None:
            return "pending"
        if self.record.sha256 != self.file.sha256:
            return "changed"
        return "applied"


@dataclass
class MigrateResult:
    """What one ``migrate`` run did (or, with dry_run, would do)."""

    applied: list[str] = field(default_factory=list)
    dims: int = DEFAULT_DIMS
    dry_run: bool = False
    statements: list[str] = field(default_factory=list)

    @property
    def nothing_to_do(self) -> bool:
        return not self.applied


@dataclass
class Status:
    """Installed state of pgrag in one database."""

    migrations: list[MigrationState]
    pgvector_available: str | None
    pgvector_installed: str | None
    dims: int | None
    model: str | None
    provider: str | None

    @property
    def pending(self) -> list[MigrationState]:
        return [m for m in self.migrations if m.state != "applied"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "pgvector": {
                "available": self.pgvector_available,
                "installed": self.pgvector_installed,
            },
            "embedding": {"dims": self.dims, "model": self.model, "provider": self.provider},
            "migrations": [
                {
                    "name": m.file.name,
                    "kind": m.file.kind,
                    "state": m.state,
                    "sha256": m.file.sha256,
                    "applied_sha256": m.record.sha256 if m.record else None,
                    "applied_at": m.record.applied_at.isoformat() if m.record else None,
                    "version": m.record.version if m.record else None,
                }
                for m in self.migrations
            ],
            "up_to_date": not self.pending,
        }


class Migrator:
    """Brings one database to the SQL shipped with this version of pgrag."""

    def __init__(self, dsn: str, root: Path | None = None) -> None:
        self.dsn = dsn
        self.files = discover(root)

    # -- reading state -------------------------------------------------------------------------

    def status(self) -> Status:
        with connect(self.dsn, autocommit=True) as conn:
            available, installed = _pgvector_versions(conn)
            records = _read_records(conn)
            config = _read_embedding_config(conn)
        states = [MigrationState(f, records.get(f.name)) for f in self.files]
        dims, model, provider = config if config else (None, None, None)
        return Status(states, available, installed, dims, model, provider)

    # -- applying ------------------------------------------------------------------------------

    def migrate(self, dims: int | None = None, *, dry_run: bool = False) -> MigrateResult:
        """Apply pending incremental files, then the idempotent tier if anything changed."""
        if dims is not None and not 1 <= dims <= MAX_DIMS:
            raise ConfigError(
                f"--dims {dims} is out of range: pgvector indexes vectors of 1 to {MAX_DIMS} "
                "dimensions."
            )
        with connect(self.dsn, autocommit=True) as conn:
            conn.execute("select pg_advisory_lock(%s)", (LOCK_KEY,))
            try:
                return self._migrate_locked(conn, dims, dry_run)
            finally:
                conn.execute("select pg_advisory_unlock(%s)", (LOCK_KEY,))

    def _migrate_locked(
        self, conn: psycopg.Connection[Any], dims: int | None, dry_run: bool
    ) -> MigrateResult:
        available, _ = _pgvector_versions(conn)
        if available is None:
            raise PgvectorMissing(
                "the pgvector extension is not available on this PostgreSQL server: install it "
                "(e.g. the postgresql-NN-pgvector package, or build it from "
                "github.com/pgvector/pgvector), "
                "or omit --dsn to use pgrag's embedded database, which includes it."
            )
        records = _read_records(conn)
        config = _read_embedding_config(conn)
        installed_dims = config[0] if config else None
        if installed_dims is not None and dims is not None and dims != installed_dims:
            raise ConfigError(
                f"this database was installed with {installed_dims}-dimension embeddings; "
                f"--dims {dims} would need a new database (or drop schema pgrag and re-ingest)."
            )
        effective_dims = installed_dims or dims or DEFAULT_DIMS
        result = MigrateResult(dims=effective_dims, dry_run=dry_run)

        incremental = [f for f in self.files if f.kind == "incremental"]
        idempotent = [f for f in self.files if f.kind == "idempotent"]
        for f in incremental:
            record = records.get(f.name)
            if record is not None and record.sha256 != f.sha256:
                raise ChecksumMismatch(
                    f"{f.name} changed after it was applied (recorded sha256 {record.sha256[:12]}, "
                    f"file {f.sha256[:12]}): released migrations must not be edited; "
                    "restore the file and add a new migration instead."
                )
        pending = [f for f in incremental if f.name not in records]
        idempotent_stale = bool(pending) or any(
            (r := records.get(f.name)) is None or r.sha256 != f.sha256 for f in idempotent
        )

        if dry_run:
            schema = _vector_schema(conn) or _current_schema(conn)
            for f in pending:
                result.statements.append(
                    f"-- {f.name}\nbegin;\nset local pgrag.embedding_dims = {effective_dims};\n"
                    f"{f.render(schema)}\ncommit;"
                )
                result.applied.append(f.name)
            if idempotent_stale:
                body = "\n".join(f"-- {f.name}\n{f.render(schema)}" for f in idempotent)
                result.statements.append(f"begin;\n{body}\ncommit;")
                result.applied.extend(f.name for f in idempotent)
            return result

        try:
            for f in pending:
                with conn.transaction():
                    conn.execute(
                        "select set_config('pgrag.embedding_dims', %s, true)",
                        (str(effective_dims),),
                    )
                    conn.execute("create extension if not exists vector")
                    conn.execute(SECURE_SEARCH_PATH_SQL)
                    text = f.render(_vector_schema(conn) or "public")
                    text = compat.for_server(f.name, text, conn.info.server_version)
                    conn.execute(text.encode())
                    _record(conn, f)
                result.applied.append(f.name)
            if idempotent_stale:
                schema = _vector_schema(conn) or "public"
                with conn.transaction():
                    conn.execute(SECURE_SEARCH_PATH_SQL)
                    for f in idempotent:
                        conn.execute(f.render(schema).encode())
                        _record(conn, f)
                result.applied.extend(f.name for f in idempotent)
                conn.execute(RELOAD_POSTGREST_SQL)
        except psycopg.Error as exc:
            failing = _first_line(exc)
            raise MigrationError(
                f"migration failed and was rolled back: {failing}. The database is unchanged "
                "from the last completed file; fix the cause and run pgrag migrate again."
            ) from exc
        return result


# -- helpers -------------------------------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _pgvector_versions(conn: psycopg.Connection[Any]) -> tuple[str | None, str | None]:
    row = conn.execute(
        "select default_version, installed_version from pg_available_extensions "
        "where name = 'vector'"
    ).fetchone()
    return (row[0], row[1]) if row else (None, None)


def _vector_schema(conn: psycopg.Connection[Any]) -> str | None:
    row = conn.execute(
        "select n.nspname from pg_extension e join pg_namespace n on n.oid = e.extnamespace "
        "where e.extname = 'vector'"
    ).fetchone()
    return str(row[0]) if row else None


def _current_schema(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("select current_schema()").fetchone()
    return str(row[0]) if row and row[0] else "public"


def _table_exists(conn: psycopg.Connection[Any], qualified: str) -> bool:
    row = conn.execute("select to_regclass(%s) is not null", (qualified,)).fetchone()
    return bool(row and row[0])


def _read_records(conn: psycopg.Connection[Any]) -> dict[str, AppliedRecord]:
    if not _table_exists(conn, "pgrag.schema_migrations"):
        return {}
    rows = conn.execute(
        "select name, kind, sha256, applied_at, version from pgrag.schema_migrations"
    ).fetchall()
    return {r[0]: AppliedRecord(*r) for r in rows}


def _read_embedding_config(
    conn: psycopg.Connection[Any],
) -> tuple[int, str | None, str | None] | None:
    if not _table_exists(conn, "pgrag.embedding_config"):
        return None
    row = conn.execute("select dims, model, provider from pgrag.embedding_config").fetchone()
    return (int(row[0]), row[1], row[2]) if row else None


def _record(conn: psycopg.Connection[Any], f: MigrationFile) -> None:
    conn.execute(
        """
        insert into pgrag.schema_migrations (name, kind, sha256, version)
        values (%s, %s, %s, %s)
        on conflict (name) do update
            set sha256 = excluded.sha256, applied_at = now(), version = excluded.version
        """,
        (f.name, f.kind, f.sha256, __version__),
    )
