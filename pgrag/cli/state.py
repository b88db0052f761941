"""What every ``pgrag`` command shares: which database it talks to.

(The context an LLM answers from is something else: ``pgrag.search.build_context``.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pgrag.local_server import EmbeddedCluster


@dataclass
class CliState:
    """Resolves the database once per command: --dsn / PGRAG_DSN, then DATABASE_URL, then the
    embedded cluster, started on demand."""

    dsn_option: str | None = None
    _resolved: str | None = field(default=None, init=False)

    @property
    def uses_embedded(self) -> bool:
        return not (self.dsn_option or os.environ.get("DATABASE_URL"))

    def dsn(self) -> str:
        if self._resolved is None:
            explicit = self.dsn_option or os.environ.get("DATABASE_URL")
            self._resolved = explicit or EmbeddedCluster().start()
        return self._resolved
