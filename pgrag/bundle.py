"""Install pgrag without Python: its migrations as one SQL file for ``psql -f``, or as files for
a Supabase ``supabase/migrations/`` folder.

Both forms run the very files :mod:`pgrag.migrator` applies, in the same order and with the same
records in ``pgrag.schema_migrations``, so ``pgrag migrate`` afterwards finds nothing to do (and
a database installed by the migrator can be upgraded with a bundle, and back). Each migration is
one ``DO`` block, hence one transaction, guarded by what the database has recorded:

* an incremental file already recorded with the same SHA-256 is skipped; recorded with another
  SHA-256 it stops the run, as the migrator does;
* the idempotent tier is re-applied when one of its files is missing or changed, or when an
  incremental file was applied after it; then ``pg_notify('pgrst', 'reload schema')``.

``@extschema:vector@`` is resolved when the bundle runs: to the schema pgvector is installed in
(created in ``--vector-schema`` when missing). The embedding dimension is the setting
``pgrag.embedding_dims``, read only by the first install; the bundle sets it on its first
lines, to ``--dims``, and refuses a database installed with another dimension.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pgrag import __version__
from pgrag.errors import ConfigError
from pgrag.migrator import (
    DEFAULT_DIMS,
    LOCK_KEY,
    MAX_DIMS,
    VECTOR_SCHEMA_TOKEN,
    MigrationFile,
    discover,
    quote_ident,
)

SUPABASE_VECTOR_SCHEMA = "extensions"
_BODY_TAG = "pgrag_sql"
_BLOCK_TAG = "pgrag_bundle"
_SUPABASE_NAME = re.compile(r"^(\d{14})_(.+)\.sql$")


def _literal(text: str) -> str:
    """``text`` as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _dollar(text: str, tag: str) -> str:
    """``text`` dollar-quoted with a tag that does not occur in it."""
    candidate, n = tag, 0
    while f"${candidate}$" in text:
        n += 1
        candidate = f"{tag}{n}"
    return f"${candidate}${text}${candidate}$"


def _check(dims: int, vector_schema: str) -> None:
    if not 1 <= dims <= MAX_DIMS:
        raise ConfigError(
            f"--dims {dims} is out of range: pgvector indexes vectors of 1 to {MAX_DIMS} "
            "dimensions."
        )
    if not vector_schema or "\x00" in vector_schema:
        raise ConfigError("--vector-schema needs a schema name, e.g. public or extensions.")


# -- the SQL pieces ------------------------------------------------------------------------------

_PROLOGUE = """\
    perform pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    perform pg_catalog.pg_advisory_xact_lock({lock_key});"""


def _preflight(dims: int) -> str:
    """Refuse a database installed with another embedding dimension (as ``migrate --dims``)."""
    block = f"""
declare
    wanted text := coalesce(nullif(pg_catalog.current_setting('pgrag.embedding_dims', true), ''),
                            '{dims}');
    installed integer;
begin
{_PROLOGUE.format(lock_key=LOCK_KEY)}
    if pg_catalog.to_regclass('pgrag.embedding_config') is not null then
        select c.dims into installed from pgrag.embedding_config as c;
        if installed is not null and installed::text <> wanted then
            raise exception 'pgrag: this database was installed with %-dimension embeddings, '
                'the bundle asks for %', installed, wanted
                using hint = pg_catalog.format(
                    'set pgrag.embedding_dims = %s at the top of the bundle '
                    '(or pgrag sql-bundle --dims %s)', installed, installed);
        end if;
    end if;
end
"""
    return f"do {_dollar(block, _BLOCK_TAG)};\n"


def _incremental_block(f: MigrationFile, dims: int, vector_schema: str) -> str:
    name = _literal(f.name)
    block = f"""
declare
    vs name;
    recorded text;
begin
{_PROLOGUE.format(lock_key=LOCK_KEY)}
    if pg_catalog.to_regclass('pgrag.schema_migrations') is not null then
        select m.sha256 into recorded from pgrag.schema_migrations as m where m.name = {name};
        if recorded = {_literal(f.sha256)} then
            raise notice 'pgrag: % is already applied', {name};
            return;
        elsif recorded is not null then
            raise exception 'pgrag: % changed after it was applied (recorded sha256 %, bundle %)',
                {name}, pg_catalog.left(recorded, 12), {_literal(f.sha256[:12])}
                using hint = 'released migrations must not be edited; use the bundle of the '
                             'pgrag version that installed this database, or pgrag migrate';
        end if;
    end if;
    perform pg_catalog.set_config(
        'pgrag.embedding_dims',
        coalesce(nullif(pg_catalog.current_setting('pgrag.embedding_dims', true), ''), '{dims}'),
        true);
    if not exists (select 1 from pg_catalog.pg_extension where extname = 'vector') then
        execute pg_catalog.format('create extension vector schema %I', {_literal(vector_schema)});
    end if;
    select n.nspname into vs
    from pg_catalog.pg_extension as e join pg_catalog.pg_namespace as n on n.oid = e.extnamespace
    where e.extname = 'vector';
    execute pg_catalog.replace({_dollar(f.text, _BODY_TAG)},
        {_literal(VECTOR_SCHEMA_TOKEN)}, pg_catalog.quote_ident(vs));
    insert into pgrag.schema_migrations (name, kind, sha256, version)
    values ({name}, 'incremental', {_literal(f.sha256)}, {_literal(__version__)})
    on conflict (name) do update
        set sha256 = excluded.sha256, applied_at = pg_catalog.now(), version = excluded.version;
    raise notice 'pgrag: applied %', {name};
end
"""
    return f"-- {f.name} (sha256 {f.sha256})\ndo {_dollar(block, _BLOCK_TAG)};\n"


def _idempotent_block(files: Sequence[MigrationFile]) -> str:
    expected = ", ".join(f"({_literal(f.name)}, {_literal(f.sha256)})" for f in files)
    steps = "\n".join(
        f"""    -- {f.name}
    execute pg_catalog.replace({_dollar(f.text, _BODY_TAG)},
        {_literal(VECTOR_SCHEMA_TOKEN)}, pg_catalog.quote_ident(vs));
    insert into pgrag.schema_migrations (name, kind, sha256, version)
    values ({_literal(f.name)}, 'idempotent', {_literal(f.sha256)}, {_literal(__version__)})
    on conflict (name) do update
        set sha256 = excluded.sha256, applied_at = pg_catalog.now(), version = excluded.version;"""
        for f in files
    )
    block = f"""
declare
    vs name;
    stale boolean;
begin
{_PROLOGUE.format(lock_key=LOCK_KEY)}
    -- Stale when a file is missing or changed, or an incremental file was applied after the tier.
    select exists (
               select 1
               from (values {expected}) as want (name, sha256)
               left join pgrag.schema_migrations as m on m.name = want.name
               where m.sha256 is distinct from want.sha256)
        or coalesce((select max(m.applied_at) from pgrag.schema_migrations as m
                     where m.kind = 'incremental')
                    > (select min(m.applied_at) from pgrag.schema_migrations as m
                       where m.kind = 'idempotent'), false)
      into stale;
    if not stale then
        raise notice 'pgrag: functions, policies and grants are up to date';
        return;
    end if;
    select n.nspname into vs
    from pg_catalog.pg_extension as e join pg_catalog.pg_namespace as n on n.oid = e.extnamespace
    where e.extname = 'vector';
{steps}
    perform pg_catalog.pg_notify('pgrst', 'reload schema');
    raise notice 'pgrag: applied functions, policies and grants ({len(files)} files)';
end
"""
    names = ", ".join(f.name for f in files)
    return f"-- idempotent tier: {names}\ndo {_dollar(block, _BLOCK_TAG)};\n"


def _header(dims: int, vector_schema: str, how: str) -> str:
    return f"""\
-- pgrag {__version__}: {how}
-- Generated by `pgrag sql-bundle`; do not edit below the settings.
-- Each migration is one DO block (one transaction), skipped when pgrag.schema_migrations already
-- records it, so running this again is safe and `pgrag migrate` recognises the installation.
-- pgvector is created in schema {quote_ident(vector_schema)} when missing; an installed pgvector
-- is used wherever it is.
"""


def bundle_sql(
    dims: int = DEFAULT_DIMS, vector_schema: str = "public", root: Path | None = None
) -> str:
    """One SQL file installing or upgrading pgrag, for ``psql -v ON_ERROR_STOP=1 -f``."""
    _check(dims, vector_schema)
    files = discover(root)
    incremental = [f for f in files if f.kind == "incremental"]
    idempotent = [f for f in files if f.kind == "idempotent"]
    parts = [
        _header(
            dims,
            vector_schema,
            'install or upgrade with psql alone:\n--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 '
            "-f pgrag.sql",
        ),
        "\\set ON_ERROR_STOP on\n",
        "-- Settings (session-wide; read when the bundle runs).\n"
        "-- Embedding dimension, used by the first install only: 384 for the local model,\n"
        "-- 1536 for OpenAI text-embedding-3-small, 768, ... A database installed with another\n"
        "-- dimension is refused.\n"
        f"set pgrag.embedding_dims = {dims};\n"
        "-- Optional: statement timeouts for the API roles in this database (default: keep an\n"
        "-- existing one, else anon 3s and authenticated 8s).\n"
        "-- set pgrag.anon_statement_timeout = '3s';\n"
        "-- set pgrag.authenticated_statement_timeout = '8s';\n",
        _preflight(dims),
    ]
    parts.extend(_incremental_block(f, dims, vector_schema) for f in incremental)
    parts.append(_idempotent_block(idempotent))
    return "\n".join(parts)


# -- Supabase migrations folder ------------------------------------------------------------------


@dataclass(frozen=True)
class SupabaseFile:
    name: str
    sql: str


def _tier_digest(files: Iterable[MigrationFile]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}:{f.sha256}\n".encode())
    return h.hexdigest()[:12]


def supabase_files(
    dims: int = DEFAULT_DIMS,
    vector_schema: str = SUPABASE_VECTOR_SCHEMA,
    root: Path | None = None,
    existing: Iterable[str] = (),
    now: datetime | None = None,
) -> list[SupabaseFile]:
    """Files for ``supabase/migrations/``: one per incremental migration not yet in the folder,
    then one with the idempotent tier unless the folder already holds the same one.

    Names are ``<UTC timestamp>_pgrag_<...>.sql``, later than every file already there (the
    Supabase CLI applies them in name order and refuses new files older than applied ones).
    """
    _check(dims, vector_schema)
    existing = list(existing)
    files = discover(root)
    incremental = [f for f in files if f.kind == "incremental"]
    idempotent = [f for f in files if f.kind == "idempotent"]
    stamps = [m.group(1) for n in existing if (m := _SUPABASE_NAME.match(n))]
    start = (now or datetime.now(UTC)).replace(microsecond=0, tzinfo=None)
    if stamps:
        start = max(start, datetime.strptime(max(stamps), "%Y%m%d%H%M%S") + timedelta(seconds=1))

    def suffix(f: MigrationFile) -> str:
        return f"_pgrag_{f.kind}_{f.path.stem}.sql"

    out: list[tuple[str, str]] = []
    for f in incremental:
        if not any(n.endswith(suffix(f)) for n in existing):
            out.append((suffix(f), _incremental_block(f, dims, vector_schema)))
    tier_suffix = f"_pgrag_idempotent_{__version__}_{_tier_digest(idempotent)}.sql"
    if out or not any(n.endswith(tier_suffix) for n in existing):
        out.append((tier_suffix, _idempotent_block(idempotent)))

    head = _header(
        dims, vector_schema, "Supabase migration (supabase db push / supabase migration up)"
    )
    result = []
    for i, (name_suffix, body) in enumerate(out):
        stamp = (start + timedelta(seconds=i)).strftime("%Y%m%d%H%M%S")
        result.append(SupabaseFile(f"{stamp}{name_suffix}", f"{head}\n{_preflight(dims)}\n{body}"))
    return result


def write_supabase(
    directory: Path,
    dims: int = DEFAULT_DIMS,
    vector_schema: str = SUPABASE_VECTOR_SCHEMA,
    root: Path | None = None,
    now: datetime | None = None,
) -> list[Path]:
    """Write :func:`supabase_files` into ``directory`` (created if needed); return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    existing = [p.name for p in directory.glob("*.sql")]
    written = []
    for f in supabase_files(dims, vector_schema, root, existing, now):
        path = directory / f.name
        path.write_text(f.sql, encoding="utf-8")
        written.append(path)
    return written
