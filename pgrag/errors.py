"""pgrag's exceptions: one root, each carrying a one-line, user-facing message."""

from __future__ import annotations


class PgragError(Exception):
    """Root of every error pgrag raises on purpose.

    ``str(error)`` is the line shown to the user: what went wrong and what to do;
    ``exit_code`` the CLI's exit status (docs/cli.md, "Exit codes").
    """

    exit_code = 1


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


class MissingExtra(PgragError):
    """An optional part of pgrag is not installed; the message names the pip extra."""


class NothingToDo(PgragError):
    """The command found nothing to work on: no matching files, no documents, unknown tenant."""

    exit_code = 3


class Interrupted(PgragError):
    """The user interrupted the command (Ctrl-C); the message says what was kept."""

    exit_code = 130
