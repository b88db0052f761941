"""Every command path ends a failure with one line, no traceback and a non-zero exit status.

Each command runs with a malformed connection string, an unreachable server, an unknown
text-search language (where it takes one) and an option value it must refuse; the output must
be exactly one line ``Error: ...``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import psycopg
import pytest
from click.testing import CliRunner

from pgrag.cli import main
from pgrag.db import connect, database_error_message
from pgrag.ingest import ingest_paths

MALFORMED_DSN = "not a dsn"
UNREACHABLE_DSN = "postgresql://pgrag@127.0.0.1:1/none?connect_timeout=3"


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A one-document BEIR dataset (eval reads it before it connects)."""
    folder = tmp_path / "tiny"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "text": "widgets"}) + "\n")
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "widgets"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return folder


@pytest.fixture
def doc(tmp_path: Path) -> Path:
    path = tmp_path / "note.md"
    path.write_text("# Note\n\nThe widget service listens on port 8443.\n")
    return path


def database_commands(dataset: Path, doc: Path) -> dict[str, list[str]]:
    """Every command that talks to the database, with arguments that are otherwise valid."""
    return {
        "status": ["status"],
        "migrate": ["migrate"],
        "search": ["search", "widget"],
        "ask": ["ask", "widget?"],
        "facets": ["facets", "widget"],
        "suggest": ["suggest", "widgit"],
        "eval": ["eval", str(dataset)],
        "ingest": ["ingest", str(doc)],
        "delete": ["delete", str(doc), "--yes"],
        "embed": ["embed", "widget"],
        "import": ["import", "--table", "documents"],
        "worker": ["worker", "--once"],
        "reembed": ["reembed", "--status"],
        "stats": ["stats"],
    }


# An option value each command must refuse (a usage error, before any work).
BAD_VALUES: dict[str, list[str]] = {
    "status": ["status", "--no-such-option"],
    "migrate": ["migrate", "--dims", "many"],
    "search": ["search", "widget", "--mode", "telepathic"],
    "ask": ["ask", "widget?", "-k", "0"],
    "facets": ["facets", "widget", "--max-values", "0"],
    "suggest": ["suggest", "widgit", "--min-similarity", "0.1"],
    "eval": ["eval", "/no/such/dataset"],
    "ingest": ["ingest", ".", "--chunker", "sentences-of-klingon"],
    "delete": ["delete", "--id", "first"],
    "embed": ["embed"],
    "import": ["import", "--table", "documents", "--embedder", "telepathic"],
    "worker": ["worker", "--batch", "0"],
    "reembed": ["reembed", "--model", "m", "--dims", "0"],
    "stats": ["stats", "--since", "yesterday"],
    "sql-bundle": ["sql-bundle", "--dims", "0"],
    "db start": ["db", "start", "--port", "1"],
    "db stop": ["db", "stop", "--now"],
    "db status": ["db", "status", "--json", "extra"],
    "db url": ["db", "url", "--json"],
}


def all_command_paths() -> set[str]:
    paths: set[str] = set()
    for name, command in main.commands.items():
        if isinstance(command, click.Group):
            paths |= {f"{name} {sub}" for sub in command.commands}
        else:
            paths.add(name)
    return paths


def assert_one_line_error(result: Any, *, exit_code: int | None = None) -> str:
    """The result of a failed command: one line ``Error: ...``, no traceback, exit != 0."""
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code != 0
    if exit_code is not None:
        assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("Error: "), result.output
    return lines[0]


def invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(main, list(args), env=env)


def test_the_tables_cover_every_command(dataset: Path, doc: Path) -> None:
    commands = all_command_paths()
    assert set(BAD_VALUES) == commands
    with_database = set(database_commands(dataset, doc))
    assert with_database == {c for c in commands if not c.startswith(("db ", "sql-bundle"))}


@pytest.mark.parametrize(
    "command",
    [
        "status",
        "migrate",
        "search",
        "ask",
        "facets",
        "suggest",
        "eval",
        "ingest",
        "delete",
        "embed",
        "reembed",
        "stats",
        "worker",
    ],
)
def test_a_malformed_connection_string_is_one_line(command: str, dataset: Path, doc: Path) -> None:
    args = database_commands(dataset, doc)[command]
    line = assert_one_line_error(invoke("--dsn", MALFORMED_DSN, *args), exit_code=1)
    assert "invalid connection string" in line and "postgresql://" in line
    # the same through the environment
    result = invoke(*args, env={"PGRAG_DSN": MALFORMED_DSN})
    assert "invalid connection string" in assert_one_line_error(result, exit_code=1)


@pytest.mark.parametrize(
    "command",
    [
        "status",
        "migrate",
        "search",
        "ask",
        "facets",
        "suggest",
        "eval",
        "ingest",
        "delete",
        "embed",
        "reembed",
        "stats",
        "worker",
    ],
)
def test_an_unreachable_server_is_one_line(command: str, dataset: Path, doc: Path) -> None:
    args = database_commands(dataset, doc)[command]
    line = assert_one_line_error(invoke("--dsn", UNREACHABLE_DSN, *args), exit_code=1)
    assert "cannot connect to the database" in line and "Check --dsn" in line


@pytest.mark.parametrize("command", sorted(BAD_VALUES))
def test_an_option_value_the_command_refuses_is_one_line(command: str) -> None:
    line = assert_one_line_error(invoke(*BAD_VALUES[command]), exit_code=2)
    assert "--help" in line  # says where to look


def commands_with_a_language_option() -> list[str]:
    return sorted(
        name
        for name, command in main.commands.items()
        if any("--language" in p.opts for p in command.params)
    )


def test_search_ingest_and_worker_take_a_language() -> None:
    assert commands_with_a_language_option() == [
        "facets",
        "import",
        "ingest",
        "search",
        "suggest",
        "worker",
    ]


@pytest.fixture
def corpus(db: str, doc: Path, local_embedder: Any) -> str:
    ingest_paths(db, [str(doc)], embedder=local_embedder)
    return db


def assert_lists_the_configurations(line: str) -> None:
    """The line names the choices, the server's own configurations (not a query to run)."""
    assert "one of arabic, " in line and ", english, " in line and ", simple, " in line
    assert "select cfgname" not in line


def test_an_unknown_language_is_one_line_from_search_in_every_mode(corpus: str) -> None:
    for mode in ("keyword", "hybrid", "vector"):
        args = ["search", "widget", "--mode", mode, "--language", "klingon"]
        result = invoke("--dsn", corpus, *args)
        if mode == "vector":  # the vector arm has no text-search configuration
            assert result.exit_code == 0, result.output
            continue
        line = assert_one_line_error(result, exit_code=1)
        assert "klingon" in line and "text search configuration" in line
        assert_lists_the_configurations(line)


@pytest.mark.parametrize("command", ["facets", "suggest"])
def test_an_unknown_language_is_one_line_from_facets_and_suggest(corpus: str, command: str) -> None:
    line = assert_one_line_error(
        invoke("--dsn", corpus, command, "widgit", "--language", "klingon"), exit_code=1
    )
    assert "klingon" in line and "text search configuration" in line
    assert_lists_the_configurations(line)


def test_an_unknown_language_is_one_line_from_ingest(db: str, doc: Path) -> None:
    line = assert_one_line_error(
        invoke("--dsn", db, "ingest", str(doc), "--language", "klingon"), exit_code=1
    )
    assert "--language" in line and "klingon" in line
    assert_lists_the_configurations(line)


def test_an_unknown_language_is_one_line_from_the_worker_at_start(db: str) -> None:
    line = assert_one_line_error(
        invoke("--dsn", db, "worker", "--once", "--language", "klingon"), exit_code=1
    )
    assert "--language" in line and "klingon" in line
    assert_lists_the_configurations(line)


def test_pgrag_argument_checks_in_sql_print_the_server_message(db: str) -> None:
    # 22023 raised by pgrag's own SQL argument checks is printed as the server wrote it.
    with connect(db) as conn, pytest.raises(psycopg.Error) as caught:
        conn.execute("select * from pgrag.delete_documents(document_ids => '{1}')")  # no tenant
    assert caught.value.sqlstate == "22023"
    message = database_error_message(caught.value)
    assert message.startswith(str(caught.value.diag.message_primary))
    assert "\n" not in message and str(caught.value.diag.message_hint) in message


def test_a_database_without_pgrag_says_to_migrate(empty_db: str) -> None:
    line = assert_one_line_error(invoke("--dsn", empty_db, "search", "x", "--mode", "keyword"))
    assert "pgrag migrate" in line


def test_a_file_error_is_one_line_naming_the_file(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "pgrag.sql"
    line = assert_one_line_error(invoke("sql-bundle", "-o", str(target)), exit_code=1)
    assert line == f"Error: No such file or directory: {target}"


def test_the_installed_command_prints_no_traceback_for_a_malformed_dsn() -> None:
    pgrag = Path(sys.executable).with_name("pgrag")
    env = {**os.environ, "PGRAG_DSN": MALFORMED_DSN}
    for args in (["status"], ["search", "x"], ["ingest", "."]):
        done = subprocess.run(
            [str(pgrag), *args], capture_output=True, text=True, env=env, timeout=60
        )
        assert done.returncode == 1
        assert "Traceback" not in done.stderr
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("Error: invalid")
        assert done.stdout == ""


def pgrag_command() -> str:
    return str(Path(sys.executable).with_name("pgrag"))


@pytest.mark.parametrize(
    "args",
    [["status"], ["search", "widget", "--mode", "keyword", "-k", "50"], ["stats"], ["--help"]],
    ids=["status", "search", "stats", "help"],
)
def test_a_closed_stdout_ends_the_command_quietly_with_141(corpus: str, args: list[str]) -> None:
    # The reader is gone before the command writes its first line: every write fails (EPIPE).
    env = {**os.environ, "PGRAG_DSN": corpus}
    with subprocess.Popen(
        [pgrag_command(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        stderr = process.stderr.read()
        assert process.wait(timeout=60) == 141
    assert stderr == b""


def test_a_pipe_into_head_prints_the_first_line_and_no_error(corpus: str) -> None:
    env = {**os.environ, "PGRAG_DSN": corpus}
    for args in ("status", "search widget --mode keyword -k 50"):
        done = subprocess.run(
            ["bash", "-c", f"{pgrag_command()} {args} | head -1; exit ${{PIPESTATUS[0]}}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert done.returncode in (0, 141)  # 0 when it wrote everything before head left
        assert done.stderr == ""
        assert len(done.stdout.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["migrate", "--dims", "0"], "Invalid value for '--dims': 0 is not in the range"),
        (["migrate", "--dims", "4001"], "Invalid value for '--dims': 4001 is not in the range"),
        (["eval", "DATASET", "--mode", "telepathic"], "unknown eval mode 'telepathic'"),
        (["eval", "DATASET", "--mode", "hybrid:rrf_k=many"], "'hybrid:rrf_k=many': invalid"),
        (["eval", "DATASET", "--mode", "hybrid:colour=red"], "'colour' is no tunable"),
        (["search", "x", "--metadata", "[1]"], "Invalid value for '--metadata': takes a JSON"),
    ],
)
def test_a_bad_value_is_a_usage_error_before_any_work(
    args: list[str], message: str, dataset: Path
) -> None:
    args = [str(dataset) if a == "DATASET" else a for a in args]
    line = assert_one_line_error(invoke("--dsn", UNREACHABLE_DSN, *args), exit_code=2)
    assert message in line and "--help" in line
