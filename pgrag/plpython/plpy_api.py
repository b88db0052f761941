"""The ``plpy`` module PL/Python puts in every function's globals, as types.

PostgreSQL documents the module (https://www.postgresql.org/docs/current/plpython-database.html):
``execute``, ``prepare``, ``cursor``, the message functions (``debug`` ... ``fatal``, with the
keyword arguments ``detail``, ``hint``, ``sqlstate`` and the object names), ``quote_*``,
``subtransaction``, and the exceptions ``Error``, ``Fatal``, ``SPIError`` and
``spiexceptions.<ConditionName>``. :class:`Plpy` is a Protocol: the real module satisfies it
structurally, :class:`pgrag.plpython.plpy_stub.PlpyStub` implements it for the tests, and
mypy checks :mod:`pgrag.plpython.server` and the bodies in ``sql/`` against it. ``GD`` (a dict
shared by the functions of one session) and ``SD`` (one per function) are globals of the
function, not attributes of ``plpy``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, NoReturn, Protocol


class PLyResult(Protocol):
    """Rows of ``plpy.execute``: a sequence of dicts (column name -> value)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> dict[str, Any]: ...

    def __iter__(self) -> Iterator[dict[str, Any]]: ...

    def nrows(self) -> int: ...

    def status(self) -> int: ...

    def colnames(self) -> list[str]: ...

    def coltypes(self) -> list[int]: ...

    def coltypmods(self) -> list[int]: ...


class PLyPlan(Protocol):
    """A statement prepared by ``plpy.prepare`` (valid for the session)."""

    def execute(self, args: Sequence[Any] | None = None, max_rows: int = 0) -> PLyResult: ...

    def status(self) -> bool: ...


class SpiExceptions(Protocol):
    """``plpy.spiexceptions``: one ``SPIError`` subclass per condition name."""

    def __getattr__(self, name: str) -> type[Exception]: ...


class Plpy(Protocol):
    """The ``plpy`` module."""

    Error: type[Exception]
    Fatal: type[Exception]
    SPIError: type[Exception]
    spiexceptions: SpiExceptions

    def execute(
        self, query: str | PLyPlan, args: Sequence[Any] | None = None, max_rows: int = 0
    ) -> PLyResult: ...

    def prepare(self, query: str, argtypes: Sequence[str] = ()) -> PLyPlan: ...

    def debug(self, *args: object, **kwargs: str) -> None: ...

    def log(self, *args: object, **kwargs: str) -> None: ...

    def info(self, *args: object, **kwargs: str) -> None: ...

    def notice(self, *args: object, **kwargs: str) -> None: ...

    def warning(self, *args: object, **kwargs: str) -> None: ...

    def error(self, *args: object, **kwargs: str) -> NoReturn: ...

    def fatal(self, *args: object, **kwargs: str) -> NoReturn: ...

    def quote_literal(self, string: str) -> str: ...

    def quote_nullable(self, string: str | None) -> str: ...

    def quote_ident(self, string: str) -> str: ...

    def subtransaction(self) -> AbstractContextManager[Any]: ...
