"""What every ``pgrag`` command shares: which database it talks to.

(The context an LLM answers from is something else: ``pgrag.search.build_context``.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg

from pgrag.db import READ_DSN_HINT, READ_DSN_SOURCES, connect
from pgrag.errors import DatabaseUnreachable
from pgrag.local_server import EmbeddedCluster
from pgrag.usage import warn


@dataclass
class CliState:
    """Resolves the database once per command: --dsn / PGRAG_DSN, then DATABASE_URL, then the
    embedded cluster, started on demand; and where searches read: --read-dsn /
    PGRAG_READ_DSN (e.g. a hot standby), else that same database."""

    dsn_option: str | None = None
    read_dsn_option: str | None = None
    _resolved: str | None = field(default=None, init=False)

    @property
    def uses_embedded(self) -> bool:
        return not (self.dsn_option or os.environ.get("DATABASE_URL"))

    def dsn(self) -> str:
        if self._resolved is None:
            explicit = self.dsn_option or os.environ.get("DATABASE_URL")
            self._resolved = explicit or EmbeddedCluster().start()
        return self._resolved

    @property
    def separate_reads(self) -> bool:
        """Whether reads go to another server than writes (--read-dsn given)."""
        return bool(self.read_dsn_option)

    def connect_read(self) -> psycopg.Connection[Any]:
        """A connection for reading (search, ask, eval's searches); errors name --read-dsn."""
        if self.read_dsn_option:
            return connect(self.read_dsn_option, sources=READ_DSN_SOURCES, hint=READ_DSN_HINT)
        return connect(self.dsn())

    @contextmanager
    def connect_read_and_write(
        self,
    ) -> Iterator[tuple[psycopg.Connection[Any], psycopg.Connection[Any]]]:
        """A reader for searches and a connection for their side writes (query-embedding
        cache, usage, search log). Without --read-dsn both are one connection; with it the
        writes go to --dsn, or, when that server cannot be reached, to the reader too, where
        they fail quietly (a warning each) and the search still answers from the replica."""
        with self.connect_read() as reader:
            if not self.separate_reads:
                yield reader, reader
                return
            try:
                writer = connect(self.dsn())
            except DatabaseUnreachable as exc:
                warn(f"cache, usage and search log off for this command ({exc})")
                yield reader, reader
                return
            with writer:
                yield reader, writer
