"""pgrag's exceptions: one root, each carrying a one-line, user-facing message.

``SQLSTATE_ERRORS`` is the one table of the SQLSTATEs pgrag's SQL raises on purpose and the
exception each one means in Python (as ``psycopg.errors`` maps every SQLSTATE to a class);
:func:`from_database_error` applies it. It holds the installer's preflight codes too
(PR101-PR104, in the SQL :mod:`pgrag.install.migrator` writes), which the migrator turns into these
exceptions and every other failure of a step into a :class:`MigrationError`.

pgrag's SQL also raises two standard codes with their standard meaning, left as psycopg errors
(the CLI prints them with ``pgrag.db.database_error_message``): ``42501``
insufficient_privilege (another tenant's rows, a published document without the publishing
privilege) and ``23514`` check_violation (a text-search configuration not allowed for stored
chunks). ``sql/citus/`` raises ``0A000`` feature_not_supported (``pgrag migrate --citus`` on a
database without the citus extension or a coordinator without workers), which the migrator
reports as a :class:`MigrationError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg


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


class ReplicaLagging(PgragError):
    """A read replica has not replayed writes that the command needs to read."""


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


class DocumentChanged(PgragError):
    """A document changed in the database while this run was loading it (another ingest)."""


class ModelSwitchError(PgragError):
    """A model switch (``pgrag reembed``) could not start, go on or finish."""


class EmbeddingError(PgragError):
    """The embedding backend failed."""


class RerankError(PgragError):
    """The re-ranker failed: its model could not be loaded, or its API refused, timed out or
    answered something that is no re-ranking."""


class ExtractionError(PgragError):
    """A document could not be read or yielded no text."""


class TextSearchUnavailable(PgragError):
    """The database cannot embed a query itself: no PL/Python (and the query is not cached),
    or pgrag or its model is not installed for the server's Python."""


class MissingExtra(PgragError):
    """An optional part of pgrag is not installed; the message names the pip extra."""


class NothingToDo(PgragError):
    """The command found nothing to work on: no matching files, no documents, unknown tenant."""

    exit_code = 3


class LockWaitTooLong(PgragError):
    """A step waited longer than its bound for a lock another session holds; nothing of it was
    lost: running it again resumes."""


class Interrupted(PgragError):
    """The user interrupted the command (Ctrl-C); the message says what was kept."""

    exit_code = 130


class Cancelled(PgragError):
    """Work was cancelled from another thread (a worker asked to stop); nothing half done."""


class FetchFailed(ExtractionError):
    """A submitted URL could not be fetched; ``retryable`` when a later attempt may succeed
    (a timeout, a refused connection, HTTP 429 or 5xx)."""

    def __init__(self, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class FetchRefused(FetchFailed):
    """The worker refused to fetch a submitted URL (not allowed by the operator, a private
    address, a redirect elsewhere, too large): no retry can fix it."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class QueueFull(PgragError):
    """The tenant has as many documents queued as the operator allows."""


class CheckFailed(PgragError):
    """An answer could not be checked (``pgrag ask --check``): the judge's reply is not the
    JSON object asked for, or a scorer misbehaved."""


class AnswerWithheld(PgragError):
    """``pgrag ask --check`` withheld an answer whose confidence is below the threshold; the
    message says why (docs/cli.md, "Checked answers")."""

    exit_code = 4


# -- SQLSTATE -> exception ---------------------------------------------------------------------


@dataclass(frozen=True)
class SqlStateError:
    """What one SQLSTATE raised by pgrag's SQL means: the exception and its message (None: the
    server's primary message, which pgrag's SQL writes to be shown as it is)."""

    error: type[PgragError]
    message: str | None = None
    hint: bool = False  # append the server's hint to its message
    template: str | None = None
    """How the message is written from the server's ``{primary}`` message and ``{hint}``
    (with ``hint``), when not as ``primary. hint``."""


# The installer's preflight (the SQL pgrag.install.migrator writes, run by pgrag migrate and the SQL
# bundle): each refuses to apply anything and says why in its message and hint.
PGVECTOR_MISSING = "PR101"
DIMENSION_MISMATCH = "PR102"
CHANGED_MIGRATION = "PR103"
CITUS_NEEDED = "PR104"
PREFLIGHT_SQLSTATES = (PGVECTOR_MISSING, DIMENSION_MISMATCH, CHANGED_MIGRATION, CITUS_NEEDED)
_PREFLIGHT = "{primary}: {hint}."

SQLSTATE_ERRORS: dict[str, SqlStateError] = {
    # pgrag's own class PR, raised by pgrag.replace_document_chunks (the ingester's swap).
    "PR001": SqlStateError(
        DocumentChanged,
        "a document changed in the database while it was being ingested "
        "(another ingest of the same source?): run pgrag ingest again.",
    ),
    "PR002": SqlStateError(
        EmbeddingConfigError,
        "another ingest recorded a different embedding model meanwhile; mixing models is refused.",
    ),
    # raised by public.submit_document: the tenant's queue is at pgrag.queue_settings' limit.
    "PR010": SqlStateError(QueueFull),
    # PR101: the server has no pgvector (the Python installer can use the embedded database).
    PGVECTOR_MISSING: SqlStateError(
        PgvectorMissing,
        hint=True,
        template="{primary}: {hint}, or omit --dsn to use pgrag's embedded database, "
        "which includes it.",
    ),
    # PR102: the database holds embeddings of another dimension than asked for.
    DIMENSION_MISMATCH: SqlStateError(ConfigError, hint=True, template=_PREFLIGHT),
    # PR103: an applied incremental migration file changed since.
    CHANGED_MIGRATION: SqlStateError(ChecksumMismatch, hint=True, template=_PREFLIGHT),
    # PR104: Citus distributes the database's tables (only pgrag migrate --citus applies).
    CITUS_NEEDED: SqlStateError(MigrationError, hint=True, template=_PREFLIGHT),
    # Model switches (sql/idempotent/030-reembed.sql, 033-reembed-switch.sql): the server's
    # message and hint.
    # PR201: a write that waited for a switch stored embeddings of the previous model.
    "PR201": SqlStateError(EmbeddingConfigError, hint=True),
    # PR202: no re-embed is running, another one is, or embeddings of another model.
    "PR202": SqlStateError(ModelSwitchError, hint=True),
    # PR203: pgrag.chunks could not be locked for the switch's metadata-only DDL.
    "PR203": SqlStateError(ModelSwitchError, hint=True),
    # pgrag's text functions (sql/idempotent/051-text-search.sql, docs/sql-api.md): the
    # server's primary message says what is missing, its hint what to do instead.
    # PR301: no PL/Python on the server and the query is not in the query-embedding cache.
    "PR301": SqlStateError(TextSearchUnavailable),
    # PR302: the server's Python cannot import pgrag.
    "PR302": SqlStateError(TextSearchUnavailable),
    # PR303: the model or its runtime is not installed for the server's Python.
    "PR303": SqlStateError(TextSearchUnavailable),
    # PR304: the database holds embeddings of another model or dimension than PL/Python makes.
    "PR304": SqlStateError(EmbeddingConfigError),
    # invalid_parameter_value: pgrag's argument checks (pgrag.check_argument and its siblings);
    # the message starts with the argument's name and gives its range.
    "22023": SqlStateError(ConfigError),
}


def from_database_error(exc: psycopg.Error) -> PgragError | None:
    """The pgrag exception ``exc`` means by its SQLSTATE (``SQLSTATE_ERRORS``), or None."""
    meaning = SQLSTATE_ERRORS.get(exc.sqlstate or "")
    if meaning is None:
        return None
    if meaning.message is not None:
        return meaning.error(meaning.message)
    # The installer's messages start with "pgrag: " for psql users; the CLI names pgrag already.
    primary = (exc.diag.message_primary or "").removeprefix("pgrag: ")
    if not primary:
        return None
    hint = exc.diag.message_hint if meaning.hint else None
    if meaning.template is not None:
        return meaning.error(meaning.template.format(primary=primary, hint=hint or ""))
    return meaning.error(f"{primary}. {hint}" if hint else f"{primary}.")
