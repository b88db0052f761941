"""Pieces every ``pgrag`` command module shares: error handling, --json, the app context."""

from __future__ import annotations

import json
from typing import Any

import click

from pgrag.context import AppContext
from pgrag.errors import PgragError


class PgragGroup(click.Group):
    """A click group that reports :class:`PgragError` as ``Error: <message>`` with exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PgragError as exc:
            raise click.ClickException(str(exc)) from exc


def echo_json(data: Any) -> None:
    """Print ``data`` as JSON on stdout (for ``--json``)."""
    click.echo(json.dumps(data, indent=2, default=str))


json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
pass_app = click.make_pass_decorator(AppContext)
