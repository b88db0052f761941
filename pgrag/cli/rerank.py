"""The re-ranking options ``pgrag search``, ``pgrag ask`` and ``pgrag eval`` share."""

from __future__ import annotations

import click

from pgrag.cli.common import F
from pgrag.errors import ConfigError
from pgrag.rerank import DEFAULT_RERANK_TOP, MAX_RERANK_TOP, RerankSettings, reranker_from_spec
from pgrag.rerank.config import SPEC_HELP


def rerank_options(func: F) -> F:
    """``--rerank SPEC`` (env PGRAG_RERANK) and ``--rerank-top N``."""
    func = click.option(
        "--rerank-top",
        type=click.IntRange(1, MAX_RERANK_TOP),
        default=DEFAULT_RERANK_TOP,
        show_default=True,
        metavar="N",
        help="Candidates fetched and re-ranked per query (with --rerank).",
    )(func)
    return click.option(
        "--rerank",
        "rerank_spec",
        envvar="PGRAG_RERANK",
        metavar="SPEC",
        help=f"Re-rank the candidates with {SPEC_HELP} (env PGRAG_RERANK; key "
        "PGRAG_RERANK_API_KEY, model PGRAG_RERANK_MODEL).",
    )(func)


def rerank_settings(spec: str | None, top: int) -> RerankSettings | None:
    """The re-ranker ``--rerank`` names (None without one); a bad spec is a usage error."""
    if not spec or not spec.strip():
        return None
    try:
        return RerankSettings(reranker_from_spec(spec), top)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
