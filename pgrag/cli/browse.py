"""``pgrag facets`` and ``pgrag suggest``: options in, :func:`pgrag.browse.facets` /
:func:`pgrag.browse.suggest` called, results rendered. The counting and the corrections are
SQL's (public.search_facets, public.suggest_query)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from pgrag.browse import FacetValue, facets, suggest
from pgrag.cli.common import echo_json, json_option, pass_state, tenant_option
from pgrag.cli.search import filter_options, make_filters
from pgrag.cli.state import CliState
from pgrag.errors import NothingToDo


def _render_facets(rows: list[FacetValue]) -> None:
    width = max((len(r.value) for r in rows), default=0)
    current = None
    for r in rows:
        if r.facet != current:
            if current is not None:
                click.echo()
            click.echo(click.style(r.facet, bold=True))
            current = r.facet
        click.echo(f"  {r.value:<{width}}  {r.documents:>6,}")


@click.command("facets")
@click.argument("query", required=False, default="")
@click.option(
    "--key",
    "keys",
    multiple=True,
    metavar="KEY",
    help="Also count the values of this metadata key (repeatable, at most 10).",
)
@click.option(
    "--max-values",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Values shown per facet, most documents first (months: latest first; 100 at most).",
)
@click.option("--language", help="Text-search configuration of the query (english, simple, ...).")
@filter_options
@tenant_option()
@json_option
@pass_state
def facets_command(
    state: CliState,
    query: str,
    keys: tuple[str, ...],
    max_values: int,
    language: str | None,
    document_ids: tuple[int, ...],
    metadata: dict[str, Any] | None,
    source_types: tuple[str, ...],
    after: datetime | None,
    before: datetime | None,
    tenant: str,
    as_json: bool,
) -> None:
    """Count the documents matching QUERY per source type, per month and per value of each
    --key, to narrow a search by.

    \b
    A document matches when keyword search can return it for QUERY under the same filters;
    without QUERY every document passing the filters counts. Each value's count is what
    searching with its filter (--source-type, --after/--before, --metadata) returns.
    Examples:
      pgrag facets "vacation policy" --key team
      pgrag facets --key team --key tags --json
    Exit status 3 when no document matches.
    """
    with state.connect_read() as conn:
        rows = facets(
            conn,
            query,
            tenant=tenant,
            metadata_keys=keys,
            max_values=max_values,
            language=language,
            filters=make_filters(document_ids, metadata, source_types, after, before),
        )
    if as_json:
        echo_json([r.as_dict() for r in rows])
    if not rows:
        what = f"matches {query!r}" if query.strip() else "passes the filters"
        raise NothingToDo(f"no document of tenant {tenant!r} {what}.")
    if not as_json:
        _render_facets(rows)


@click.command("suggest")
@click.argument("query")
@click.option("--language", help="Text-search configuration of the query (english, simple, ...).")
@click.option(
    "--min-similarity",
    type=click.FloatRange(0.2, 1),
    default=None,
    help="Trigram similarity a suggestion needs (0.2 to 1; default 0.2).",
)
@tenant_option()
@json_option
@pass_state
def suggest_command(
    state: CliState,
    query: str,
    language: str | None,
    min_similarity: float | None,
    tenant: str,
    as_json: bool,
) -> None:
    """Suggest a corrected QUERY ("did you mean"): each word without postings in the
    tenant's documents is replaced by the closest word of that tenant's own vocabulary.

    \b
    Example:
      pgrag suggest "hybird serch"     ->  hybrid search
    Prints the query unchanged (exit 0) when every word is known or nothing is close.
    """
    if not query.strip():
        raise click.BadParameter("must not be empty.", param_hint="QUERY")
    with state.connect_read() as conn:
        result = suggest(
            conn, query, tenant=tenant, language=language, min_similarity=min_similarity
        )
    if as_json:
        echo_json(result.as_dict())
        return
    if not result.changed:
        click.echo(query)
        click.echo("(no correction: every word is known or nothing is close)", err=True)
        return
    click.echo(result.suggested_query)
    for c in result.corrections:
        click.echo(
            f"  {c.word} -> {c.suggestion} ({c.edits} edit{'s' if c.edits != 1 else ''}, "
            f"similarity {c.similarity:.2f})",
            err=True,
        )
