"""``pgrag migrate --citus``: pgrag on a Citus coordinator, its tables distributed by tenant.

The install engine runs as for any database (:class:`pgrag.install.migrator.Migrator`, the same
steps as the bundle), with the Citus tier (``sql/citus/NNN-name.sql``) as its last step: applied in
one transaction whenever one of its files changed or the idempotent tier was applied again (which
re-creates the policies the Citus tier replaces). What the tier does and why: docs/scaling.md and
the files' own comments. This module checks the coordinator and gives the session the settings the
steps need:

* ``citus.enable_unsafe_triggers = on``: creating triggers on distributed tables (the idempotent
  tier re-creates pgrag's) and distributing tables that have triggers;
* ``citus.propagate_set_commands = none``: Citus would otherwise send the workers the whole text
  of a step holding a ``SET LOCAL`` (a step is one query string);
* on an installation whose tables are distributed already, ``citus.enable_ddl_propagation =
  off``: a new version's idempotent tier then runs on the coordinator alone (Citus refuses its
  subquery policies and the tenant column's default on distributed tables, and forwards trigger
  DDL as the text of the whole step); the Citus step turns propagation on for itself, re-makes
  the policies and brings the workers up to date (``sql/citus/003-workers.sql``). A new
  version's incremental files (tables, columns, indexes) are refused there: their DDL must
  reach the shards, which is not automated yet (docs/scaling.md).

Re-running with nothing new to apply is a no-op.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgrag.db import connect
from pgrag.errors import ConfigError, MigrationError
from pgrag.install.migrator import VECTOR_HNSW_MAX_DIMS, MigrateResult, Migrator

SESSION_SETTINGS = ("citus.enable_unsafe_triggers=on", "citus.propagate_set_commands=none")
UPGRADE_SETTINGS = ("citus.enable_ddl_propagation=off",)


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


def migrate_citus(
    dsn: str, dims: int | None = None, *, dry_run: bool = False, root: Path | None = None
) -> MigrateResult:
    """Migrate as :meth:`Migrator.migrate`, then distribute pgrag's tables over Citus; ``root``
    as :class:`Migrator`'s (the SQL of another version, for benchmarks comparing two)."""
    if dims is not None and dims > VECTOR_HNSW_MAX_DIMS:
        raise ConfigError(
            f"--dims {dims} is not supported with --citus: a distributed database holds "
            f"embeddings of at most {VECTOR_HNSW_MAX_DIMS} dimensions."
        )
    with connect(dsn, autocommit=True) as conn:
        distributed = _check_citus(conn)
    settings = list(SESSION_SETTINGS)
    if distributed:
        pending = Migrator(dsn, root=root, citus=True).migrate(dims, dry_run=True).applied
        incremental = [name for name in pending if name.startswith("incremental/")]
        if incremental:
            raise MigrationError(
                "pgrag's tables are distributed over Citus and this version adds "
                f"incremental migrations ({', '.join(incremental)}): applying those to a "
                "distributed installation is not automated yet; see docs/scaling.md, "
                "Limits and known differences."
            )
        settings.extend(UPGRADE_SETTINGS)
    migrator = Migrator(_with_options(dsn, *settings), root=root, citus=True)
    return migrator.migrate(dims, dry_run=dry_run)
