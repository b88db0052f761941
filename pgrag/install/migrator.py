"""pgrag's install engine: which SQL runs, in which transaction, how it is recorded.

Two tiers live under ``sql/``:

* ``incremental/NNN-name.sql`` — tables, columns, indexes. Applied once each, in order, each in
  its own transaction, and recorded with its SHA-256. Changing an applied file is an error.
* ``idempotent/NNN-name.sql`` — functions, triggers, policies, grants (``CREATE OR REPLACE``).
  Re-applied together, in one transaction, whenever the tier is not current (see below).

Every way of installing pgrag runs the same **steps** (:func:`install_steps`), each one SQL
statement — a ``DO`` block, hence one transaction — that looks at ``pgrag.schema_migrations``
and decides for itself whether to run:

1. ``settings``: ``set pgrag.embedding_dims = N`` (only when a dimension is asked for);
2. ``preflight``: refuses, before anything is applied, a server without pgvector, an applied
   incremental file that changed, a database installed with another dimension, and (but for
   ``pgrag migrate --citus``) a database whose tables Citus distributes;
3. one step per incremental file: skipped when recorded, applied and recorded otherwise;
4. ``idempotent``: the whole tier, when one of its files is not ``applied``; then
   ``pg_notify('pgrst', 'reload schema')``. A file of :data:`SERVER_DEPENDENT` is not
   ``applied`` either when what it installed is not what this server would get now (the text
   functions' PL/Python or stub variant, passed to the file as ``pgrag.text_search_variant``);
5. ``citus`` (``pgrag migrate --citus`` only, :mod:`pgrag.install.citus`): ``citus/NNN-name.sql``,
   what a Citus coordinator needs on top (distribution by tenant; docs/scaling.md), applied as the
   idempotent tier is, after it, when one of its files is not ``applied``. Its records (kind
   ``idempotent``, names ``citus/...``) go whenever the idempotent tier is applied, so the Citus
   tier follows every re-application of the tier it builds on.

What ``applied`` means is written once, in :func:`state_sql`: a file is *pending* (not
recorded), *changed* (recorded with another SHA-256), *stale* (an idempotent file recorded
before the latest incremental file, or while one is pending: new tables need the tier's
policies and grants), or *applied*. The steps, ``pgrag migrate --dry-run`` and ``pgrag
status`` all run that query.

``pgrag migrate`` (:class:`Migrator`) holds a session advisory lock, executes the steps one by
one and reads the records to report what ran. ``pgrag sql-bundle`` (:mod:`pgrag.install.bundle`)
writes the same steps into one file for ``psql -f``, or into Supabase migration files.
"""

from __future__ import annotations

import hashlib
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, cast

import psycopg

from pgrag import __version__
from pgrag.db import VECTOR_SCHEMA_SQL, connect
from pgrag.errors import (
    CHANGED_MIGRATION,
    CITUS_NEEDED,
    DIMENSION_MISMATCH,
    PGVECTOR_MISSING,
    PREFLIGHT_SQLSTATES,
    ConfigError,
    MigrationError,
    PgragError,
    from_database_error,
)
from pgrag.install import compat

Kind = Literal["incremental", "idempotent", "citus"]
KINDS: tuple[Kind, ...] = ("incremental", "idempotent")  # the tiers every installation runs
FILE_NAME = re.compile(r"^\d{3}-[a-z][a-z0-9_-]*\.sql$")
DEFAULT_DIMS = 384
# pgvector's HNSW limits: 2,000 dimensions for vector, 4,000 for halfvec. A wider database keeps
# vector(N) columns and indexes embedding::halfvec(N) (incremental/018-wide-embeddings.sql).
VECTOR_HNSW_MAX_DIMS = 2000
MAX_DIMS = 4000
# incremental/001-core.sql (released: never edited) records the dimension under a check of at
# most 2,000 and indexes vector(N): a wider database gets it applied with 2,000, and
# 018-wide-embeddings.sql sets the dimension asked for on the still empty table.
WIDE_PLACEHOLDER_FILE = "incremental/001-core.sql"
WIDE_FILE = "incremental/018-wide-embeddings.sql"
# Where pgvector is created when the database lacks it; an installed pgvector is used anywhere.
DEFAULT_VECTOR_SCHEMA = "public"
# One advisory lock key for every pgrag installer ("pgrag" in ASCII, then 1).
LOCK_KEY = 0x7067726167_01

VECTOR_SCHEMA_TOKEN = "@extschema:vector@"
# Each step resolves names in pg_catalog only: no caller schema can hijack the DDL.
_SECURE_SEARCH_PATH = "pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)"
SECURE_SEARCH_PATH_SQL = f"select {_SECURE_SEARCH_PATH}"


State = Literal["pending", "applied", "changed", "stale"]

# pgrag's text functions (pgrag.compute_query_embedding and pgrag.chunk_text) come in two
# variants, PL/Python or stubs (sql/idempotent/051-text-search.sql). Which one a server gets, as
# an SQL expression evaluated by the server when the tier is applied: PL/Python when the server
# offers plpython3u and the role that installs is a superuser (only a superuser may create
# functions in an untrusted language). The idempotent step passes it to the file in the setting
# pgrag.text_search_variant.
TEXT_SEARCH_WANTED_SQL = (
    "(case when exists (select from pg_catalog.pg_available_extensions as x"
    " where x.name = 'plpython3u')"
    " and (select r.rolsuper from pg_catalog.pg_roles as r where r.rolname = current_user)"
    " then 'plpython' else 'stub' end)"
)
# The variant installed, read from the catalog (the language of compute_query_embedding): null
# when the function is missing.
TEXT_SEARCH_INSTALLED_SQL = (
    "(select case l.lanname when 'plpython3u' then 'plpython' else 'stub' end"
    " from pg_catalog.pg_proc as p"
    " join pg_catalog.pg_language as l on l.oid = p.prolang"
    " where p.oid = pg_catalog.to_regprocedure('pgrag.compute_query_embedding(text)'))"
)
# Idempotent files whose result depends on the server, with an SQL condition that is true when
# what is installed is not what the server would get now: the file is then stale (re-applied by
# the next installation) although no file changed.
SERVER_DEPENDENT: dict[str, str] = {
    "idempotent/051-text-search.sql": (
        f"{TEXT_SEARCH_INSTALLED_SQL} is distinct from {TEXT_SEARCH_WANTED_SQL}"
    ),
}


def sql_dir() -> Path:
    """The folder holding ``incremental/`` and ``idempotent/`` (in the wheel or the checkout)."""
    package = Path(__file__).resolve().parents[1]  # pgrag/ (this module is pgrag/install/)
    for candidate in (package / "sql", package.parent / "sql"):
        if (candidate / "incremental").is_dir():
            return candidate
    raise MigrationError(
        f"pgrag's SQL files are missing (looked in {package / 'sql'}); reinstall pgrag."
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
    def recorded_kind(self) -> str:
        """``kind`` as pgrag.schema_migrations records it (a Citus file as ``idempotent``)."""
        return "incremental" if self.kind == "incremental" else "idempotent"

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


def discover(root: Path | None = None, *, citus: bool = False) -> list[MigrationFile]:
    """All migration files, incremental first, each tier in numeric order; names are checked.

    Incremental files are numbered 001, 002, ... without gaps. Idempotent files may leave gaps
    (privileges sit in a late band, ``900-...``), but no two share a number. With ``citus``,
    the files of ``citus/`` follow (numbered as the idempotent tier).
    """
    root = root or sql_dir()
    files: list[MigrationFile] = []
    kinds: tuple[Kind, ...] = (*KINDS, "citus") if citus else KINDS
    for kind in kinds:
        folder = root / kind
        paths = sorted(p for p in folder.iterdir() if p.suffix == ".sql") if folder.is_dir() else []
        previous = 0
        for expected, path in enumerate(paths, start=1):
            if not FILE_NAME.match(path.name):
                raise MigrationError(
                    f"bad migration file name {kind}/{path.name}: use NNN-lowercase-name.sql"
                )
            number = int(path.name[:3])
            if kind == "incremental" and number != expected:
                raise MigrationError(
                    f"migration numbering gap in {kind}/: expected {expected:03d}, "
                    f"found {path.name}"
                )
            if number == previous:
                raise MigrationError(
                    f"two migration files numbered {number:03d} in {kind}/: renumber {path.name}"
                )
            previous = number
            files.append(MigrationFile(kind, path))
    return files


def check_dims(dims: int | None) -> None:
    """Refuse a dimension pgvector cannot index (before anything connects)."""
    if dims is not None and not 1 <= dims <= MAX_DIMS:
        raise ConfigError(
            f"--dims {dims} is out of range: pgvector indexes vectors of 1 to {MAX_DIMS} "
            "dimensions."
        )


# -- the SQL every installer runs ----------------------------------------------------------------


def literal(text: str) -> str:
    """``text`` as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def dollar_quote(text: str, tag: str) -> str:
    """``text`` dollar-quoted with a tag that does not occur in it."""
    candidate, n = tag, 0
    while f"${candidate}$" in text:
        n += 1
        candidate = f"{tag}{n}"
    return f"${candidate}${text}${candidate}$"


def state_sql(files: Sequence[MigrationFile]) -> str:
    """The one definition of a file's state: a query with a row per file of ``files``.

    Columns: ``ord`` (position in ``files``), ``name``, ``kind``, ``sha256`` (the file's),
    ``recorded_sha256``, ``applied_at``, ``version`` (of the record, or null) and ``state``:

    * ``pending``: not recorded;
    * ``changed``: recorded with another SHA-256 (an error for an incremental file);
    * ``stale``: an idempotent file recorded before the latest incremental file, or while an
      incremental file of ``files`` is pending (the tier must be re-applied: a new table needs
      its policies and grants, a new column the functions that read it), or a file of
      :data:`SERVER_DEPENDENT` whose installed result is not what the server would get now
      (e.g. PL/Python became available);
    * ``applied``: recorded as it is.

    Reads ``pgrag.schema_migrations``, which must exist; run it with the pinned search_path.
    """
    values = ",\n        ".join(
        f"({i}, {literal(f.name)}, {literal(f.kind)}, {literal(f.sha256)}, "
        f"{SERVER_DEPENDENT.get(f.name, 'false')})"
        for i, f in enumerate(files)
    )
    return f"""with want (ord, name, kind, sha256, drifted) as (
    values
        {values}
), incremental as (
    select (select pg_catalog.max(m.applied_at) from pgrag.schema_migrations as m
            where m.kind = 'incremental') as latest,
           exists (select from want as w
                   where w.kind = 'incremental'
                     and not exists (select from pgrag.schema_migrations as m
                                     where m.name = w.name)) as pending
)
select w.ord, w.name, w.kind, w.sha256,
       m.sha256 as recorded_sha256, m.applied_at, m.version,
       case
           when m.name is null then 'pending'
           when m.sha256 <> w.sha256 then 'changed'
           when w.kind in ('idempotent', 'citus')
                and (m.applied_at < i.latest or i.pending or w.drifted) then 'stale'
           else 'applied'
       end as state
from want as w
cross join incremental as i
left join pgrag.schema_migrations as m on m.name = w.name
order by w.ord"""


@dataclass(frozen=True)
class Step:
    """One SQL statement of an installation: one transaction, deciding for itself to run."""

    name: str
    sql: str
    files: tuple[MigrationFile, ...] = ()


def _prologue() -> str:
    return (
        f"    perform {_SECURE_SEARCH_PATH};\n"
        f"    perform pg_catalog.pg_advisory_xact_lock({LOCK_KEY});"
    )


def _states(files: Sequence[MigrationFile], indent: int) -> str:
    """:func:`state_sql` as a parenthesised subquery for a block indented by ``indent``."""
    query = textwrap.indent(state_sql(files), " " * (indent + 4))
    return f"(\n{query}\n{' ' * indent})"


def _do(body: str) -> str:
    return f"do {dollar_quote(body, 'pgrag_step')};\n"


def _refuse_changed(row: str) -> str:
    """PL/pgSQL raising the changed-file error for record variable ``row`` (of state_sql)."""
    return f"""raise exception 'pgrag: % changed after it was applied (recorded sha256 %, now %)',
                {row}.name, pg_catalog.left({row}.recorded_sha256, 12),
                pg_catalog.left({row}.sha256, 12)
                using errcode = '{CHANGED_MIGRATION}',
                      hint = 'released migrations must not be edited: restore the file and add a '
                             'new migration instead (or install with the pgrag version that '
                             'installed this database)';"""


def _file_text(f: MigrationFile) -> str:
    """An SQL expression of ``f``'s text as this server runs it: a statement of
    :data:`pgrag.install.compat.BEFORE_17` is replaced on servers older than PostgreSQL 17
    (decided by the server when the step runs, so one bundle serves every version)."""
    text = f.text
    expression = dollar_quote(text, "pgrag_sql")
    for written, older in compat.rewrites(f.name, text):
        expression = (
            f"pg_catalog.replace({expression}, {literal(written)},\n"
            f"        case when pg_catalog.current_setting('server_version_num')::integer"
            f" < {compat.SET_EXPRESSION_MIN_VERSION}\n"
            f"             then {literal(older)} else {literal(written)} end)"
        )
    return expression


def _execute_file(f: MigrationFile) -> str:
    """PL/pgSQL running ``f`` (pgvector's schema in ``vs``) and recording it."""
    return f"""    -- {f.name}
    execute pg_catalog.replace({_file_text(f)},
        {literal(VECTOR_SCHEMA_TOKEN)}, pg_catalog.quote_ident(vs));
    insert into pgrag.schema_migrations (name, kind, sha256, version)
    values ({literal(f.name)}, {literal(f.recorded_kind)}, {literal(f.sha256)},
            {literal(__version__)})
    on conflict (name) do update
        set sha256 = excluded.sha256, applied_at = pg_catalog.now(), version = excluded.version;"""


def _refuse_distributed() -> str:
    """PL/pgSQL refusing a database whose pgrag tables Citus distributes (only the Citus step
    knows how to apply the tiers there)."""
    return f"""    if pg_catalog.to_regclass('pg_catalog.pg_dist_partition') is not null then
        execute 'select exists (select from pg_catalog.pg_dist_partition as p '
                'where p.logicalrelid operator(pg_catalog.=) '
                'pg_catalog.to_regclass(''pgrag.chunks''))'
        into distributed;
        if distributed then
            raise exception 'pgrag: this database''s tables are distributed over Citus'
                using errcode = '{CITUS_NEEDED}',
                      hint = 'install and upgrade it with pgrag migrate --citus on the '
                             'coordinator (docs/scaling.md); the SQL bundle and the Supabase '
                             'files install single servers';
        end if;
    end if;"""


def _preflight(files: Sequence[MigrationFile], dims: int | None) -> Step:
    incremental = [f for f in files if f.kind == "incremental"]
    asked = literal(str(dims)) if dims is not None else "null"
    citus = any(f.kind == "citus" for f in files)
    body = f"""
declare
    wanted text := coalesce(nullif(pg_catalog.current_setting('pgrag.embedding_dims', true), ''),
                            {asked});
    installed integer;
    distributed boolean;
    rec record;
begin
{_prologue()}
    if not exists (select from pg_catalog.pg_available_extensions where name = 'vector') then
        raise exception 'pgrag: the pgvector extension is not available on this PostgreSQL server'
            using errcode = '{PGVECTOR_MISSING}',
                  hint = 'install it (e.g. the postgresql-NN-pgvector package, or build it from '
                         'github.com/pgvector/pgvector)';
    end if;
    if pg_catalog.to_regclass('pgrag.schema_migrations') is not null then
        select * into rec
        from {_states(incremental, 8)} as s
        where s.state = 'changed'
        order by s.ord
        limit 1;
        if found then
            {_refuse_changed("rec")}
        end if;
    end if;
    if pg_catalog.to_regclass('pgrag.embedding_config') is not null then
        select c.dims into installed from pgrag.embedding_config as c;
        -- (a wide install stopped before {WIDE_FILE} holds the dimension {WIDE_PLACEHOLDER_FILE}
        -- was applied with, on an empty table: that file sets the one asked for)
        if installed = {VECTOR_HNSW_MAX_DIMS} and wanted ~ '^[0-9]{{1,4}}$'
           and wanted::integer > {VECTOR_HNSW_MAX_DIMS}
           and not exists (select from pgrag.schema_migrations as m
                           where m.name = {literal(WIDE_FILE)}) then
            installed := wanted::integer;
        end if;
        if installed::text <> wanted then
            raise exception 'pgrag: this database was installed with %-dimension embeddings, not %',
                installed, wanted
                using errcode = '{DIMENSION_MISMATCH}',
                      hint = pg_catalog.format(
                          'another dimension needs a new database (or drop schema pgrag and '
                          're-ingest); to upgrade this one, ask for %s (pgrag migrate --dims %s, '
                          'or set pgrag.embedding_dims = %s at the top of the bundle)',
                          installed, installed, installed);
        end if;
    end if;
{"" if citus else _refuse_distributed()}
end
"""
    return Step("preflight", "-- preflight: pgvector, changed files, dimension\n" + _do(body))


def _incremental_step(f: MigrationFile, dims: int | None, vector_schema: str) -> Step:
    body = f"""
declare
    vs name;
    rec record;
begin
{_prologue()}
    if pg_catalog.to_regclass('pgrag.schema_migrations') is not null then
        select * into rec from {_states([f], 8)} as s;
        if rec.state = 'applied' then
            raise notice 'pgrag: % is already applied', rec.name;
            return;
        elsif rec.state = 'changed' then
            {_refuse_changed("rec")}
        end if;
    end if;
    -- Read by the first migration (the dimension of a new database) and the one making it wide.
    perform pg_catalog.set_config(
        'pgrag.embedding_dims',
        coalesce(nullif(pg_catalog.current_setting('pgrag.embedding_dims', true), ''),
                 {literal(str(dims or DEFAULT_DIMS))}),
        true);
{_wide_placeholder(f)}    vs := ({VECTOR_SCHEMA_SQL});
    if vs is null then
        execute pg_catalog.format('create extension vector schema %I', {literal(vector_schema)});
        vs := {literal(vector_schema)};
    end if;
{_execute_file(f)}
    raise notice 'pgrag: applied %', {literal(f.name)};
end
"""
    return Step(f.name, f"-- {f.name} (sha256 {f.sha256})\n" + _do(body), (f,))


def _wide_placeholder(f: MigrationFile) -> str:
    """PL/pgSQL applying :data:`WIDE_PLACEHOLDER_FILE` with at most 2,000 dimensions (its check
    and its vector index allow no more; :data:`WIDE_FILE` then sets a wider one)."""
    if f.name != WIDE_PLACEHOLDER_FILE:
        return ""
    setting = "pg_catalog.current_setting('pgrag.embedding_dims')"
    most = VECTOR_HNSW_MAX_DIMS
    return f"""    if {setting} ~ '^[0-9]{{1,4}}$' and {setting}::integer > {most} then
        perform pg_catalog.set_config('pgrag.embedding_dims', {literal(str(most))}, true);
    end if;
"""


def _idempotent_step(files: Sequence[MigrationFile]) -> Step:
    tier = [f for f in files if f.kind == "idempotent"]
    names = ", ".join(literal(f.name) for f in tier)
    steps = "\n".join(_execute_file(f) for f in tier)
    body = f"""
declare
    vs name;
begin
{_prologue()}
    if not exists (select from {_states(files, 4)} as s
                   where s.kind = 'idempotent' and s.state <> 'applied') then
        raise notice 'pgrag: functions, policies and grants are up to date';
        return;
    end if;
    vs := ({VECTOR_SCHEMA_SQL});
    -- What the server-dependent files install here (see SERVER_DEPENDENT).
    perform pg_catalog.set_config('pgrag.text_search_variant', {TEXT_SEARCH_WANTED_SQL}, true);
{steps}
    -- The tier is recorded as a whole: records of idempotent files this version lacks go (and
    -- those of the Citus tier, which must follow it: pgrag migrate --citus applies it next).
    delete from pgrag.schema_migrations as m
    where m.kind = 'idempotent' and m.name <> all (array[{names}]);
    perform pg_catalog.pg_notify('pgrst', 'reload schema');
    raise notice 'pgrag: applied functions, policies and grants ({len(tier)} files)';
end
"""
    listing = ", ".join(f.name for f in tier)
    return Step("idempotent", f"-- idempotent tier: {listing}\n" + _do(body), tuple(tier))


def _citus_step(files: Sequence[MigrationFile]) -> Step:
    tier = [f for f in files if f.kind == "citus"]
    names = ", ".join(literal(f.name) for f in tier)
    steps = "\n".join(_execute_file(f) for f in tier)
    body = f"""
declare
    vs name;
begin
{_prologue()}
    if not exists (select from {_states(files, 4)} as s
                   where s.kind = 'citus' and s.state <> 'applied') then
        raise notice 'pgrag: the Citus tier is up to date';
        return;
    end if;
    vs := ({VECTOR_SCHEMA_SQL});
{steps}
    delete from pgrag.schema_migrations as m
    where m.name like 'citus/%' and m.name <> all (array[{names}]);
    perform pg_catalog.pg_notify('pgrst', 'reload schema');
    raise notice 'pgrag: applied the Citus tier ({len(tier)} files)';
end
"""
    listing = ", ".join(f.name for f in tier)
    return Step("citus", f"-- Citus tier: {listing}\n" + _do(body), tuple(tier))


@dataclass(frozen=True)
class InstallSteps:
    """The steps of one installation (see the module docstring), by role."""

    settings: Step | None
    preflight: Step
    incremental: list[Step]
    idempotent: Step
    citus: Step | None = None

    @property
    def checks(self) -> list[Step]:
        """The steps that change nothing in the database: settings and preflight."""
        return [self.preflight] if self.settings is None else [self.settings, self.preflight]

    @property
    def work(self) -> list[Step]:
        """The steps that apply files, in order."""
        return [*self.incremental, self.idempotent, *([self.citus] if self.citus else [])]


def install_steps(
    files: Sequence[MigrationFile],
    dims: int | None = None,
    vector_schema: str = DEFAULT_VECTOR_SCHEMA,
) -> InstallSteps:
    """The statements that install or upgrade pgrag: ``checks`` then ``work``, in that order.

    ``dims`` is the dimension asked for: a new database gets it (default 384), an installed one
    with another is refused; None asks for nothing. ``vector_schema`` is where pgvector is
    created when the database lacks it. Files of kind ``citus`` (``discover(citus=True)``) add
    the Citus step.
    """
    check_dims(dims)
    if not vector_schema or "\x00" in vector_schema:
        raise ConfigError("--vector-schema needs a schema name, e.g. public or extensions.")
    return InstallSteps(
        settings=None
        if dims is None
        else Step("settings", f"set pgrag.embedding_dims = {dims};\n"),
        preflight=_preflight(files, dims),
        incremental=[
            _incremental_step(f, dims, vector_schema) for f in files if f.kind == "incremental"
        ],
        idempotent=_idempotent_step(files),
        citus=_citus_step(files) if any(f.kind == "citus" for f in files) else None,
    )


# -- pgrag migrate / pgrag status -----------------------------------------------------------------


@dataclass(frozen=True)
class AppliedRecord:
    name: str
    kind: str
    sha256: str
    applied_at: datetime
    version: str


@dataclass(frozen=True)
class MigrationState:
    """A file and what the database knows of it (:func:`state_sql`)."""

    file: MigrationFile
    record: AppliedRecord | None
    state: State


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
    # pgrag's text functions: the variant installed ("plpython" or "stub", read from the
    # catalog; None when not installed) and the one a migrate by this role would install.
    text_search: str | None = None
    text_search_wanted: str | None = None

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
            "text_search": self.text_search,
            "text_search_wanted": self.text_search_wanted,
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

    def __init__(
        self,
        dsn: str,
        root: Path | None = None,
        vector_schema: str = DEFAULT_VECTOR_SCHEMA,
        *,
        citus: bool = False,
    ) -> None:
        """``citus``: the Citus tier too (run it through :func:`pgrag.install.citus.migrate_citus`,
        which checks the coordinator and sets the session's Citus settings)."""
        self.dsn = dsn
        self.files = discover(root, citus=citus)
        self.vector_schema = vector_schema

    def status(self) -> Status:
        with connect(self.dsn, autocommit=True) as conn:
            available, installed = _pgvector_versions(conn)
            states = read_states(conn, self.files)
            config = _read_embedding_config(conn)
            variants = conn.execute(
                f"select {TEXT_SEARCH_INSTALLED_SQL}, {TEXT_SEARCH_WANTED_SQL}".encode()
            ).fetchone()
        dims, model, provider = config if config else (None, None, None)
        text_search, wanted = variants if variants else (None, None)
        return Status(states, available, installed, dims, model, provider, text_search, wanted)

    def migrate(self, dims: int | None = None, *, dry_run: bool = False) -> MigrateResult:
        """Run :func:`install_steps` under the advisory lock; report the files they applied.

        With ``dry_run``, run only the settings and the preflight (which change nothing) and
        return the steps that would run.
        """
        steps = install_steps(self.files, dims, self.vector_schema)
        with connect(self.dsn, autocommit=True) as conn:
            conn.execute("select pg_advisory_lock(%s)", (LOCK_KEY,))
            try:
                return self._migrate_locked(conn, steps, dims, dry_run)
            finally:
                conn.execute("select pg_advisory_unlock(%s)", (LOCK_KEY,))

    def _migrate_locked(
        self,
        conn: psycopg.Connection[Any],
        steps: InstallSteps,
        dims: int | None,
        dry_run: bool,
    ) -> MigrateResult:
        for step in steps.checks:
            _execute(conn, step)
        before = {m.file.name: m for m in read_states(conn, self.files)}
        if dry_run:
            # A step runs when one of its files is not applied: exactly what the step checks.
            # The Citus step also runs after any other (the idempotent tier drops its records).
            would_run: list[Step] = []
            for s in steps.work:
                if any(before[f.name].state != "applied" for f in s.files) or (
                    s is steps.citus and would_run
                ):
                    would_run.append(s)
            config = _read_embedding_config(conn)
            return MigrateResult(
                applied=[f.name for s in would_run for f in s.files],
                dims=(config[0] if config else None) or dims or DEFAULT_DIMS,
                dry_run=True,
                statements=[s.sql for s in steps.checks + would_run] if would_run else [],
            )
        for step in steps.work:
            _execute(conn, step)
        after = read_states(conn, self.files)
        config = _read_embedding_config(conn)
        return MigrateResult(
            applied=[m.file.name for m in after if m.record != before[m.file.name].record],
            dims=config[0] if config else DEFAULT_DIMS,
        )


# -- helpers -------------------------------------------------------------------------------------


def _execute(conn: psycopg.Connection[Any], step: Step) -> None:
    """Run one step (autocommit: its own transaction), turning failures into pgrag's errors."""
    try:
        conn.execute(step.sql.encode())
    except psycopg.Error as exc:
        raise _install_error(exc) from exc


def _install_error(exc: psycopg.Error) -> PgragError:
    """A preflight refusal as its exception (errors.SQLSTATE_ERRORS); any other failure as a
    :class:`MigrationError` saying the step was rolled back."""
    if exc.sqlstate in PREFLIGHT_SQLSTATES:
        error = from_database_error(exc)
        if error is not None:
            return error
    return MigrationError(
        f"migration failed and was rolled back: {_first_line(exc)}. The database is "
        "unchanged from the last completed file; fix the cause and run pgrag migrate again."
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _pgvector_versions(conn: psycopg.Connection[Any]) -> tuple[str | None, str | None]:
    row = conn.execute(
        "select default_version, installed_version from pg_available_extensions "
        "where name = 'vector'"
    ).fetchone()
    return (row[0], row[1]) if row else (None, None)


def _table_exists(conn: psycopg.Connection[Any], qualified: str) -> bool:
    row = conn.execute("select to_regclass(%s) is not null", (qualified,)).fetchone()
    return bool(row and row[0])


def read_states(
    conn: psycopg.Connection[Any], files: Sequence[MigrationFile]
) -> list[MigrationState]:
    """Each file's state in the database ``conn`` (autocommit) is connected to."""
    if not _table_exists(conn, "pgrag.schema_migrations"):
        return [MigrationState(f, None, "pending") for f in files]
    with conn.transaction():
        conn.execute(SECURE_SEARCH_PATH_SQL)
        rows = conn.execute(state_sql(files).encode()).fetchall()
    states = []
    for f, (_, name, kind, _, recorded, applied_at, version, state) in zip(
        files, rows, strict=True
    ):
        record = AppliedRecord(name, kind, recorded, applied_at, version) if recorded else None
        states.append(MigrationState(f, record, cast(State, state)))
    return states


def _read_embedding_config(
    conn: psycopg.Connection[Any],
) -> tuple[int, str | None, str | None] | None:
    if not _table_exists(conn, "pgrag.embedding_config"):
        return None
    row = conn.execute("select dims, model, provider from pgrag.embedding_config").fetchone()
    return (int(row[0]), row[1], row[2]) if row else None
