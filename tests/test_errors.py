"""The SQLSTATE -> exception table: every code pgrag's SQL raises is mapped or documented."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgrag import errors
from pgrag.errors import (
    SQLSTATE_ERRORS,
    ConfigError,
    DocumentChanged,
    EmbeddingConfigError,
    from_database_error,
)

SQL = Path(__file__).resolve().parents[1] / "sql"
# Standard codes pgrag's SQL raises with their standard meaning, left as psycopg errors.
STANDARD = {"42501", "23514", "0A000"}


def raised_sqlstates() -> set[str]:
    """Every ``errcode = '...'`` of pgrag's SQL, condition names turned into their SQLSTATE."""
    codes = set()
    for path in SQL.rglob("*.sql"):
        for code in re.findall(r"errcode\s*=\s*'([^']+)'", path.read_text()):
            codes.add(code if re.fullmatch(r"[0-9A-Z]{5}", code) else lookup(code))
    return codes


def lookup(condition: str) -> str:
    sqlstate = psycopg.errors.lookup(condition).sqlstate
    assert sqlstate is not None, condition
    return sqlstate


def test_every_sqlstate_pgrag_raises_is_in_the_table_or_documented_as_standard() -> None:
    codes = raised_sqlstates()
    assert {"PR001", "PR002", "22023"} <= codes
    assert codes <= SQLSTATE_ERRORS.keys() | STANDARD
    assert {c for c in codes if c.startswith("PR")} <= SQLSTATE_ERRORS.keys()
    for code in STANDARD:
        assert code in (errors.__doc__ or ""), f"{code} is not documented in pgrag/errors.py"


def raise_in_sql(conn: psycopg.Connection[Any], code: str, hint: str = "") -> psycopg.Error:
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(
            f"do $$ begin raise exception 'window_size must be between 0 and 10 (got 99)' "
            f"using errcode = '{code}'{f', hint = {hint!r}' if hint else ''}; end $$"
        )
    conn.rollback()
    return caught.value


def test_database_errors_become_the_pgrag_error_their_sqlstate_means(
    conn: psycopg.Connection[Any],
) -> None:
    changed = from_database_error(raise_in_sql(conn, "PR001"))
    assert isinstance(changed, DocumentChanged) and "run pgrag ingest again" in str(changed)
    assert isinstance(from_database_error(raise_in_sql(conn, "PR002")), EmbeddingConfigError)
    # pgrag's argument checks: the server's message, as it is.
    bad = from_database_error(raise_in_sql(conn, "22023", hint="see docs/security.md"))
    assert isinstance(bad, ConfigError)
    assert str(bad) == "window_size must be between 0 and 10 (got 99)."
    # Anything else stays a psycopg error (the CLI has a message per SQLSTATE for those).
    assert from_database_error(raise_in_sql(conn, "42501")) is None
    assert from_database_error(raise_in_sql(conn, "P0001")) is None


def test_a_missing_pgrag_schema_is_not_installed_and_other_errors_stay_themselves(
    empty_db: str, db: str
) -> None:
    from pgrag.db import connect
    from pgrag.errors import NotInstalled
    from pgrag.pipeline.embedders import read_embedding_config

    with connect(empty_db) as conn, pytest.raises(NotInstalled, match="pgrag migrate"):
        read_embedding_config(conn)
    with connect(db) as conn:  # a role that may not read the table: not "not installed"
        conn.execute("create role pgrag_test_nobody")
        conn.execute("set role pgrag_test_nobody")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            read_embedding_config(conn)
        conn.rollback()


def test_the_installer_preflight_codes_become_their_errors_with_the_hint(
    conn: psycopg.Connection[Any],
) -> None:
    from pgrag.errors import ChecksumMismatch, MigrationError, PgvectorMissing

    def raised(code: str) -> errors.PgragError | None:
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(
                "do $$ begin raise exception 'pgrag: something is off' "
                f"using errcode = '{code}', hint = 'do this'; end $$"
            )
        conn.rollback()
        return from_database_error(caught.value)

    expected = {
        "PR101": PgvectorMissing,
        "PR102": ConfigError,
        "PR103": ChecksumMismatch,
        "PR104": MigrationError,
    }
    assert set(expected) == set(errors.PREFLIGHT_SQLSTATES)
    for code, error in expected.items():
        mapped = raised(code)
        assert type(mapped) is error
        tail = ", or omit --dsn to use pgrag's embedded database, which includes it" * (
            code == "PR101"
        )
        assert str(mapped) == f"something is off: do this{tail}."
