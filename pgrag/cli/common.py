"""Pieces every ``pgrag`` command module shares: error handling, --json, the CLI state.

Every failure ends as one line on stderr and a documented exit status (docs/cli.md):
0 success, 1 an error (pgrag's own, a database error mapped by SQLSTATE, or an unexpected
one), 2 a usage error, 3 nothing to work on, 4 an answer withheld by ``ask --check``,
130 interrupted (Ctrl-C), 141 stdout closed by
its reader (``pgrag search ... | head -1``: quietly, as a Unix tool killed by SIGPIPE).
"""

from __future__ import annotations

import errno
import json
import os
import select
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click
import psycopg

from pgrag.cli.state import CliState
from pgrag.db import DEFAULT_TENANT, database_error_message, one_line
from pgrag.errors import PgragError

DEBUG_ENV = "PGRAG_DEBUG"
STDOUT_CLOSED = 141
"""Exit status when the reader of stdout went away: 128 + SIGPIPE, what a shell reports for a
Unix tool (``yes | head -1``) that the signal ended."""

F = TypeVar("F", bound=Callable[..., Any])
L = TypeVar("L", bound=str)


class CommandError(click.ClickException):
    """A one-line ``Error: ...`` with its own exit status ``status`` (click's ``exit_code`` is
    one per class; ``PgragGroup.main`` exits with ``status``)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class StdoutClosed(Exception):
    """The reader of stdout closed it (EPIPE): the command stops quietly."""


def _stdout_closed(exc: OSError) -> bool:
    """Whether ``exc`` is EPIPE from stdout, not from a socket or another pipe: stdout's pipe
    has no reader left (poll reports POLLERR). Python ignores SIGPIPE, so a write to a closed
    pipe raises instead of ending the process."""
    if exc.errno != errno.EPIPE:
        return False
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file (a test runner's buffer)
        return False
    if not hasattr(select, "poll"):
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _leave_quietly() -> None:
    """Exit with STDOUT_CLOSED, printing nothing: stdout points at /dev/null first, so that
    flushing what is still buffered at exit raises no second BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    sys.exit(STDOUT_CLOSED)


class PgragGroup(click.Group):
    """A click group that turns every error of its commands into one line.

    pgrag's errors print their message; database errors a message chosen by SQLSTATE;
    Ctrl-C ``Interrupted.`` (exit 130); anything unexpected its type and message, with the
    traceback only when PGRAG_DEBUG=1. Usage errors are one line too (exit 2). When the reader
    of stdout goes away (``| head``) the command stops without a word (exit 141).
    """

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """The root context; ``pgrag --help | head -1`` ends quietly too (exit 141)."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except OSError as exc:
            if _stdout_closed(exc):
                raise StdoutClosed from exc
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except PgragError as exc:
            raise CommandError(str(exc), exc.exit_code) from exc
        except KeyboardInterrupt as exc:
            raise CommandError("interrupted.", 130) from exc
        except psycopg.Error as exc:
            if os.environ.get(DEBUG_ENV):
                raise
            raise CommandError(database_error_message(exc)) from exc
        except OSError as exc:  # a file or folder the command was pointed at
            if _stdout_closed(exc):
                raise StdoutClosed from exc
            if os.environ.get(DEBUG_ENV):
                raise
            where = f": {exc.filename}" if exc.filename else ""
            raise CommandError(f"{exc.strerror or one_line(str(exc))}{where}") from exc
        except Exception as exc:
            if os.environ.get(DEBUG_ENV):
                raise
            message = one_line(str(exc)) or "(no message)"
            raise CommandError(
                f"unexpected {type(exc).__name__}: {message} "
                f"(set {DEBUG_ENV}=1 for the traceback, and please report it)"
            ) from exc

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The ``pgrag`` process: after Ctrl-C (exit 130) leave at once, skipping the
        interpreter's teardown (over a second with the model loaded); everything was
        committed or rolled back and closed before the message was printed."""
        try:
            return self.main(*args, **kwargs)
        except SystemExit as exc:
            if exc.code == 130:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(130)
            raise

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except StdoutClosed:
            _leave_quietly()
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "pgrag"
            click.echo(f"Error: {exc.format_message()} (see '{where} --help')", err=True)
            sys.exit(exc.exit_code)
        except CommandError as exc:
            exc.show()
            sys.exit(exc.status)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(1)
        except (KeyboardInterrupt, EOFError):
            click.echo("\nError: interrupted.", err=True)
            sys.exit(130)
        try:
            sys.stdout.flush()  # what is still buffered, before the interpreter's teardown
        except OSError as exc:
            if not _stdout_closed(exc):
                raise
            _leave_quietly()
        sys.exit(rv if isinstance(rv, int) else 0)


def echo_json(data: Any) -> None:
    """Print ``data`` as JSON on stdout (for ``--json``)."""
    click.echo(json.dumps(data, indent=2, default=str))


json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
pass_state = click.make_pass_decorator(CliState)


def parse_json_object(value: str | None, option: str = "--metadata") -> dict[str, Any] | None:
    """The JSON object given to ``option``; else a usage error (exit 2) saying what is wrong,
    as for any other bad option value."""
    if value is None:
        return None
    hint = f"'{option}'"
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON ({exc.msg}): {value}", param_hint=hint) from exc
    if not isinstance(data, dict):
        raise click.BadParameter('takes a JSON object, e.g. \'{"team": "ops"}\'.', param_hint=hint)
    return data


def json_object(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> dict[str, Any] | None:
    """Click callback of an option taking a JSON object: checked while the arguments are read."""
    return parse_json_object(value, param.opts[0] if param.opts else "--metadata")


progress_option = click.option(
    "--progress/--no-progress",
    "progress",
    default=None,
    help="Report progress on stderr: a live bar on a terminal, else one line every 10 s "
    "(env PGRAG_PROGRESS_INTERVAL). Default: on, except with --json.",
)
progress_json_option = click.option(
    "--progress-json",
    is_flag=True,
    help="Report progress on stderr as one JSON object per line, for scripts: every "
    "PGRAG_PROGRESS_INTERVAL seconds (10) and once at the end.",
)


def tenant_option(
    default: str | None = DEFAULT_TENANT, help_text: str | None = None
) -> Callable[[F], F]:
    """``--tenant`` (env PGRAG_TENANT)."""
    return click.option(
        "--tenant",
        envvar="PGRAG_TENANT",
        default=default,
        show_default=default is not None,
        help=help_text or "Search as this tenant (env PGRAG_TENANT).",
    )


def literal(value: str, choices: tuple[L, ...]) -> L:
    """``value`` as the ``Literal`` type ``choices`` enumerate: what click hands a command as a
    plain string (``click.Choice(choices)`` checked it already) gets its precise type here."""
    for choice in choices:
        if value == choice:
            return choice
    raise click.BadParameter(f"{value!r} is not one of {', '.join(choices)}.")
