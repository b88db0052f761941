"""A ``plpy`` module outside PostgreSQL, over a real database connection (for the tests).

:class:`PlpyStub` implements :class:`pgrag.plpython.plpy_api.Plpy` on a psycopg connection, so
that a PL/Python body runs in an ordinary Python process against a real PostgreSQL (the
embedded one of the tests, which has no PL/Python) with the semantics that matter to it:

* ``execute`` and ``prepare``: statements run on the connection; a plan is a server-side
  prepared statement (``PREPARE ... (argtypes) AS``), so ``$1``-style parameters and their
  declared types behave as in PL/Python; each call runs in a subtransaction (a savepoint), as
  PL/Python runs SPI calls, so a failed statement raises and leaves the transaction usable.
  Values come back as PL/Python converts them: numbers, text, booleans, ``bytea`` and arrays as
  Python values, every other type (``json``, ``jsonb``, dates, ``vector`` ...) as the type's
  text output.
* ``error`` and ``fatal`` raise :class:`Error` and :class:`Fatal` carrying ``sqlstate``,
  ``detail`` and ``hint``; a failed statement raises the ``spiexceptions`` class of its
  SQLSTATE (a :class:`SPIError`); ``debug`` ... ``warning`` are recorded in ``messages``.
* ``quote_literal``, ``quote_nullable`` and ``quote_ident`` ask the server.

Open the connection with ``psycopg.connect`` (not :func:`pgrag.db.connect`, whose pgvector
types would turn vectors into arrays: PL/Python sees their text).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, NoReturn

import psycopg
from psycopg import sql
from psycopg.adapt import Loader

# SPI result codes PL/Python reports with status() (src/include/executor/spi.h).
SPI_OK_SELECT = 5
SPI_OK_UTILITY = 4

# Types psycopg would turn into Python objects but PL/Python hands over as their text output
# (PL/Python converts booleans, numbers, text, bytea and arrays; every other type is text, and
# so are types psycopg has no loader for, such as vector and tsvector).
_AS_TEXT = (
    "json",
    "jsonb",
    "date",
    "time",
    "timetz",
    "timestamp",
    "timestamptz",
    "interval",
    "uuid",
    "inet",
    "cidr",
    "macaddr",
    "macaddr8",
    "money",
    "int4range",
    "int8range",
    "numrange",
    "daterange",
    "tsrange",
    "tstzrange",
)


class _TextLoader(Loader):
    def load(self, data: Any) -> str:
        return bytes(data).decode()


class Error(Exception):
    """``plpy.Error``: raised by ``plpy.error``; aborts the function with its SQLSTATE."""

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        detail: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint


class Fatal(Error):
    """``plpy.Fatal``: raised by ``plpy.fatal``."""


class SPIError(Exception):
    """``plpy.SPIError``: a statement run by ``execute`` failed (``sqlstate``, ``spidata``)."""

    sqlstate: ClassVar[str | None] = None

    def __init__(self, message: str, detail: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail
        self.hint = hint
        self.spidata = (self.sqlstate, detail, hint)


class SpiExceptionsStub:
    """``plpy.spiexceptions``: ``spiexceptions.UndefinedTable`` and so on, made on demand
    with the SQLSTATE psycopg knows for the condition name."""

    def __init__(self) -> None:
        self._made: dict[str, type[SPIError]] = {}

    def __getattr__(self, name: str) -> type[SPIError]:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.by_name(name)

    def by_name(self, name: str, sqlstate: str | None = None) -> type[SPIError]:
        if name not in self._made:
            known = getattr(psycopg.errors, name, None)
            state = sqlstate or getattr(known, "sqlstate", None)
            if state is None:
                raise AttributeError(f"plpy.spiexceptions has no {name}")
            self._made[name] = type(name, (SPIError,), {"sqlstate": state})
        return self._made[name]

    def for_error(self, exc: psycopg.Error) -> SPIError:
        """The ``spiexceptions`` instance PL/Python raises for a failed statement."""
        name = type(exc).__name__ if type(exc).__module__ == "psycopg.errors" else "SPIError"
        cls = self.by_name(name, exc.sqlstate) if exc.sqlstate else SPIError
        message = exc.diag.message_primary or str(exc)
        return cls(message, exc.diag.message_detail, exc.diag.message_hint)


class ResultStub(list[dict[str, Any]]):
    """What ``plpy.execute`` returns: the rows, plus PL/Python's result methods."""

    def __init__(
        self, rows: list[dict[str, Any]], status: int, columns: list[tuple[str, int, int]]
    ) -> None:
        super().__init__(rows)
        self._status = status
        self._columns = columns

    def nrows(self) -> int:
        return len(self)

    def status(self) -> int:
        return self._status

    def colnames(self) -> list[str]:
        return [c[0] for c in self._columns]

    def coltypes(self) -> list[int]:
        return [c[1] for c in self._columns]

    def coltypmods(self) -> list[int]:
        return [c[2] for c in self._columns]


class PlanStub:
    """``plpy.prepare``'s plan: a server-side prepared statement of the stub's connection."""

    def __init__(self, plpy: PlpyStub, name: str, argtypes: Sequence[str]) -> None:
        self._plpy = plpy
        self.name = name
        self.argtypes = list(argtypes)
        self.nargs = len(self.argtypes)

    def execute(self, args: Sequence[Any] | None = None, max_rows: int = 0) -> ResultStub:
        values = list(args or [])
        if len(values) != self.nargs:
            raise TypeError(f"the plan takes {self.nargs} arguments, got {len(values)}")
        statement = sql.SQL("execute {}").format(sql.Identifier(self.name))
        if values:
            # EXECUTE's arguments are expressions: each cast to the type PREPARE declared.
            arguments = sql.SQL(", ").join(
                sql.SQL("{}::{}").format(sql.Placeholder(), sql.SQL(t)) for t in self.argtypes
            )
            statement = sql.SQL("execute {} ({})").format(sql.Identifier(self.name), arguments)
        return self._plpy.run(statement, values, max_rows)

    def status(self) -> bool:
        return True


class PlpyStub:
    """``plpy`` over ``conn``: see the module docstring."""

    Error: ClassVar[type[Error]] = Error
    Fatal: ClassVar[type[Fatal]] = Fatal
    SPIError: ClassVar[type[SPIError]] = SPIError

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        for name in _AS_TEXT:  # values as PL/Python gives them (see _AS_TEXT)
            conn.adapters.register_loader(name, _TextLoader)
        self.spiexceptions = SpiExceptionsStub()
        self.messages: list[tuple[str, str]] = []  # (level, message) of debug ... warning
        self._plans = itertools.count(1)
        self._prefix = f"plpy_stub_{id(self):x}"

    # -- statements ---------------------------------------------------------------------------

    def run(
        self, statement: str | sql.Composable, args: Sequence[Any], max_rows: int
    ) -> ResultStub:
        """Run one statement in a subtransaction; rows converted as PL/Python converts them."""
        query: Any = statement.encode() if isinstance(statement, str) else statement
        try:
            # Client-side binding: EXECUTE (a utility statement) takes no bind parameters.
            with self.conn.transaction(), psycopg.ClientCursor(self.conn) as cur:
                cur.execute(query, list(args) if args else None)
                result = cur.pgresult
                if cur.description is None or result is None:
                    return ResultStub([], SPI_OK_UTILITY, [])
                rows = cur.fetchmany(max_rows) if max_rows > 0 else cur.fetchall()
                names = [c.name for c in cur.description]
                columns = [
                    (c.name, c.type_code, result.fmod(i)) for i, c in enumerate(cur.description)
                ]
        except psycopg.Error as exc:
            raise self.spiexceptions.for_error(exc) from exc
        return ResultStub([dict(zip(names, r, strict=True)) for r in rows], SPI_OK_SELECT, columns)

    def execute(
        self, query: str | Any, args: Sequence[Any] | None = None, max_rows: int = 0
    ) -> ResultStub:
        if isinstance(query, PlanStub):
            return query.execute(args, max_rows)
        if not isinstance(query, str):
            raise TypeError("plpy.execute takes a query string or a plan")
        if args:
            raise TypeError("plpy.execute passes arguments to a prepared plan only")
        return self.run(query, (), max_rows)

    def prepare(self, query: str, argtypes: Sequence[str] = ()) -> PlanStub:
        name = f"{self._prefix}_{next(self._plans)}"
        types: sql.Composable = sql.SQL("")
        if argtypes:
            types = sql.SQL("({})").format(sql.SQL(", ").join(sql.SQL(t) for t in argtypes))
        statement = sql.SQL("prepare {} {} as ").format(sql.Identifier(name), types)
        try:
            with self.conn.transaction():
                self.conn.execute(statement + sql.SQL(query))
        except psycopg.Error as exc:
            raise self.spiexceptions.for_error(exc) from exc
        return PlanStub(self, name, argtypes)

    def subtransaction(self) -> AbstractContextManager[Any]:
        return self.conn.transaction()

    def cursor(self, query: str | PlanStub, args: Sequence[Any] | None = None) -> Iterator[Any]:
        """``plpy.cursor``: the rows of ``query``, one by one (fetched at once here)."""
        return iter(self.execute(query, args))

    # -- messages -----------------------------------------------------------------------------

    @staticmethod
    def _text(args: tuple[object, ...]) -> str:
        return " ".join(str(a) for a in args) if len(args) != 1 else str(args[0])

    def _record(self, level: str, args: tuple[object, ...]) -> None:
        self.messages.append((level, self._text(args)))

    def debug(self, *args: object, **kwargs: str) -> None:
        self._record("debug", args)

    def log(self, *args: object, **kwargs: str) -> None:
        self._record("log", args)

    def info(self, *args: object, **kwargs: str) -> None:
        self._record("info", args)

    def notice(self, *args: object, **kwargs: str) -> None:
        self._record("notice", args)

    def warning(self, *args: object, **kwargs: str) -> None:
        self._record("warning", args)

    def error(self, *args: object, **kwargs: str) -> NoReturn:
        raise Error(
            self._text(args),
            sqlstate=kwargs.get("sqlstate"),
            detail=kwargs.get("detail"),
            hint=kwargs.get("hint"),
        )

    def fatal(self, *args: object, **kwargs: str) -> NoReturn:
        raise Fatal(
            self._text(args),
            sqlstate=kwargs.get("sqlstate"),
            detail=kwargs.get("detail"),
            hint=kwargs.get("hint"),
        )

    # -- quoting ------------------------------------------------------------------------------

    def _quote(self, function: str, value: str | None) -> str:
        query = sql.SQL("select pg_catalog.{}(%s::text)").format(sql.Identifier(function))
        row = self.conn.execute(query, (value,)).fetchone()
        assert row is not None
        return str(row[0])

    def quote_literal(self, string: str) -> str:
        return self._quote("quote_literal", string)

    def quote_nullable(self, string: str | None) -> str:
        return self._quote("quote_nullable", string)

    def quote_ident(self, string: str) -> str:
        return self._quote("quote_ident", string)
