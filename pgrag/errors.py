"""pgrag's exceptions: one root, each carrying a one-line, user-facing message."""

from __future__ import annotations


class PgragError(Exception):
    """Root of every error pgrag raises on purpose.

    ``str(error)`` is the line shown to the user: what went wrong and what to do.
    """


class ConfigError(PgragError):
    """A setting or option is missing or invalid."""


class DatabaseUnreachable(PgragError):
    """The database could not be reached."""


class PgvectorMissing(PgragError):
    """The server has no pgvector extension available."""


class MigrationError(PgragError):
    """A migration failed or the migration history is inconsistent."""


class ChecksumMismatch(MigrationError):
    """An applied incremental migration file has changed since it was applied."""


class NotInstalled(PgragError):
    """pgrag's schema is not installed in the target database."""


class EmbeddingConfigError(PgragError):
    """Embedding model or dimension does not match what the database holds."""


class EmbeddingError(PgragError):
    """The embedding backend failed."""


class ExtractionError(PgragError):
    """A document could not be read or yielded no text."""
