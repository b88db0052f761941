"""docs/errors.md lists every SQLSTATE pgrag raises on purpose, and only those.

The codes raised are read from the source: ``errcode = '...'`` in ``sql/`` (and in the SQL the
migrator writes in ``pgrag/``), ``sqlstate=`` of PL/Python's ``plpy.error`` calls (a module
constant or a literal), a ``raise exception`` without a code (``P0001``), the keys of
``pgrag.errors.SQLSTATE_ERRORS`` and any ``"PRnnn"`` literal in ``pgrag/``. A code is listed
when docs/errors.md has a heading naming it (``### `PR001```).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from pgrag.errors import SQLSTATE_ERRORS

REPO = Path(__file__).resolve().parents[1]
ERRORS_DOC = REPO / "docs" / "errors.md"
CODE = r"[0-9A-Z]{5}"
# PostgreSQL condition names pgrag's SQL uses instead of a code.
CONDITION_NAMES = {"check_violation": "23514", "raise_exception": "P0001"}
ERRCODE = re.compile(r"errcode\s*=\s*'([^'{}]+)'", re.IGNORECASE)
ERRCODE_PLACEHOLDER = re.compile(r"errcode\s*=\s*'\{(\w+)\}'", re.IGNORECASE)
RAISE_EXCEPTION = re.compile(r"\braise\s+exception\b", re.IGNORECASE)


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def statement_end(text: str, start: int) -> int:
    """Offset of the ``;`` ending the statement at ``start``, skipping string literals."""
    i = start
    while i < len(text):
        c = text[i]
        if c == "'":
            i += 1
            while i < len(text):
                if text[i] == "'" and text[i + 1 : i + 2] == "'":
                    i += 2
                elif text[i] == "'":
                    break
                else:
                    i += 1
        elif c == ";":
            return i
        i += 1
    return len(text)


def sql_codes(text: str, where: str, found: dict[str, list[str]]) -> None:
    for m in ERRCODE.finditer(text):
        name = m.group(1)
        code = CONDITION_NAMES.get(name.lower(), name)
        assert re.fullmatch(CODE, code), (
            f"{where}:{line_of(text, m.start())}: errcode {name!r} is a condition name this test"
            " does not know: add it to CONDITION_NAMES with its SQLSTATE"
        )
        found[code].append(f"{where}:{line_of(text, m.start())}")
    for m in RAISE_EXCEPTION.finditer(text):
        statement = text[m.start() : statement_end(text, m.end())]
        if not re.search(r"\berrcode\b", statement, re.IGNORECASE):
            found["P0001"].append(f"{where}:{line_of(text, m.start())}")


def python_constants(tree: ast.Module) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            out[node.targets[0].id] = node.value.value
    return out


def python_codes(path: Path, found: dict[str, list[str]]) -> None:
    text = path.read_text(encoding="utf-8")
    where = str(path.relative_to(REPO))
    tree = ast.parse(text)
    constants = python_constants(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            # SQL the package writes (the migrator's checks) and PR literals.
            sql_codes(node.value, f"{where}:{node.lineno} (SQL in a string)", found)
            if re.fullmatch(r"PR\d{3}", node.value):
                found[node.value].append(f"{where}:{node.lineno}")
        elif isinstance(node, ast.keyword) and node.arg == "sqlstate":
            value = node.value
            code = None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                code = value.value
            elif isinstance(value, ast.Name):
                code = constants.get(value.id)
            if code is not None and re.fullmatch(CODE, code):
                found[code].append(f"{where}:{node.lineno}")
    for m in ERRCODE_PLACEHOLDER.finditer(text):
        code = constants.get(m.group(1))
        if code is not None:
            found[code].append(f"{where}:{line_of(text, m.start())}")


def raised_codes() -> dict[str, list[str]]:
    """Every SQLSTATE pgrag raises on purpose -> where (file:line)."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted((REPO / "sql").rglob("*.sql")):
        text = path.read_text(encoding="utf-8")
        sql_codes(text, str(path.relative_to(REPO)), found)
        for m in re.finditer(r"sqlstate\s*=\s*\"(" + CODE + r")\"", text):
            found[m.group(1)].append(f"{path.relative_to(REPO)}:{line_of(text, m.start())}")
    for path in sorted((REPO / "pgrag").rglob("*.py")):
        python_codes(path, found)
    for code in SQLSTATE_ERRORS:
        found[code].append("pgrag/errors.py (SQLSTATE_ERRORS)")
    return dict(found)


def documented_codes() -> set[str]:
    text = ERRORS_DOC.read_text(encoding="utf-8")
    return set(re.findall(r"^#{2,4}\s+`?(" + CODE + r")`?\s*$", text, re.MULTILINE))


def test_every_code_pgrag_raises_is_listed_in_docs_errors_md() -> None:
    raised = raised_codes()
    missing = sorted(set(raised) - documented_codes())
    assert not missing, (
        "docs/errors.md lists no section for "
        + "; ".join(
            f"SQLSTATE {code} (raised at {', '.join(raised[code][:3])})" for code in missing
        )
        + ": add a heading '### `CODE`' saying what it means and what to do."
    )


def test_every_code_listed_in_docs_errors_md_is_still_raised() -> None:
    stale = sorted(documented_codes() - set(raised_codes()))
    assert not stale, (
        f"docs/errors.md lists {', '.join(stale)}, which nothing in sql/ or pgrag/ raises any"
        " more: remove its section (or name where it is raised)."
    )


def test_the_code_reader_finds_codes_in_each_form_it_reads() -> None:
    found: dict[str, list[str]] = defaultdict(list)
    sql_codes(
        "raise exception 'a; b' using errcode = 'PR777';\n"
        "raise exception 'no code; here', x;\n"
        "raise exception 'c' using errcode = 'check_violation';",
        "x.sql",
        found,
    )
    assert set(found) == {"PR777", "P0001", "23514"}
