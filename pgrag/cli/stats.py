"""``pgrag stats``: documents, chunks, queue, tokens, cost and cache hit rates per tenant."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

import click

from pgrag.cli.common import echo_json, json_option, pass_state
from pgrag.cli.state import CliState
from pgrag.db import connect
from pgrag.errors import NothingToDo
from pgrag.stats import AnswerCacheStats, ModelUsage, TenantStats, tenant_stats, usage_costs


def _count(n: int) -> str:
    return f"{n:,}"


def _plural(n: int, noun: str, plural: str | None = None) -> str:
    """``1 call``, ``2 calls``, ``1,000 cache hits``."""
    return f"{_count(n)} {noun if n == 1 else (plural or noun + 's')}"


def _age(seconds: float) -> str:
    """A wait as people say it: ``40 s``, ``12 min``, ``3 h 5 min``, ``2 d 4 h``."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


QUEUE_KEYS = (
    "queued",
    "retrying",
    "processing",
    "failed",
    "failed_last_hour",
    "oldest_queued_at",
    "oldest_queued_seconds",
)


def queue_line(queue: dict[str, Any]) -> str:
    """``3 queued (1 retrying), 0 processing, 2 failed (1 in the last hour), oldest waiting
    12 min`` from a tenant's row of pgrag.queue_status (no age when nothing waits); columns
    the view may gain later follow as ``name value``."""

    def n(key: str) -> int:
        return int(queue.get(key) or 0)

    retrying = f" ({n('retrying')} retrying)" if n("retrying") else ""
    recent = f" ({n('failed_last_hour')} in the last hour)" if n("failed_last_hour") else ""
    parts = [
        f"{_count(n('queued'))} queued{retrying}",
        f"{_count(n('processing'))} processing",
        f"{_count(n('failed'))} failed{recent}",
    ]
    if n("queued") and queue.get("oldest_queued_seconds") is not None:
        parts.append(f"oldest waiting {_age(float(queue['oldest_queued_seconds']))}")
    parts += [
        f"{key.replace('_', ' ')} {value}"
        for key, value in queue.items()
        if key not in QUEUE_KEYS and key != "tenant_id" and value is not None
    ]
    return ", ".join(parts)


def _cost(value: Decimal | float | None) -> str:
    return f"{float(value):.6f}".rstrip("0").rstrip(".") if value is not None else "n/a"


def print_tenant(t: TenantStats, usage: list[ModelUsage]) -> None:
    states = ", ".join(f"{state} {_count(n)}" for state, n in t.documents.items())
    click.echo(click.style(f"tenant {t.tenant_id}", bold=True))
    click.echo(f"  documents  {_count(t.document_count)}" + (f" ({states})" if states else ""))
    click.echo(f"  chunks     {_count(t.chunk_count)}")
    if t.queue is not None:
        click.echo(f"  queue      {queue_line(t.queue)}")
    click.echo(
        f"  tokens     embeddings {_count(t.embedding_tokens)}; chat "
        f"{_count(t.chat_input_tokens)} in, {_count(t.chat_output_tokens)} out"
    )
    lookups = t.query_embeddings + t.cache_hits
    rate = f" ({100 * t.cache_hit_rate:.0f} % hit rate)" if t.cache_hit_rate is not None else ""
    click.echo(
        f"  queries    {_count(lookups)} embedded: {_count(t.cache_hits)} from the cache, "
        f"{_count(t.query_embeddings)} by the model{rate}"
    )
    unpriced = f" (no price for {', '.join(t.unpriced_models)})" if t.unpriced_models else ""
    click.echo(f"  cost       {_cost(t.cost)}{unpriced}")
    for u in usage:
        click.echo(
            f"    {u.operation:<8} {u.provider}:{u.model}  {_count(u.input_tokens)} in, "
            f"{_count(u.output_tokens)} out, {_plural(u.requests, 'call')}"
            + (f", {_plural(u.cache_hits, 'cache hit')}" if u.cache_hits else "")
            + f", cost {_cost(u.cost)}"
        )
    click.echo(f"  searches   {_count(t.searches_logged)} logged")
    if t.answer_cache is not None:
        click.echo(f"  answers    {answer_cache_line(t.answer_cache)}")


def answer_cache_line(a: AnswerCacheStats) -> str:
    """``12 cached; 40 lookups, 25 hits (62 % hit rate), 3 stale removed`` (the stale part only
    when there were some)."""
    rate = f" ({100 * a.hit_rate:.0f} % hit rate)" if a.hit_rate is not None else ""
    stale = f", {_count(a.stale)} stale removed" if a.stale else ""
    return (
        f"{_count(a.entries)} cached; {_plural(a.lookups, 'lookup')}, "
        f"{_plural(a.hits, 'hit')}{rate}{stale}"
    )


@click.command()
@click.option(
    "--tenant",
    envvar="PGRAG_STATS_TENANT",
    default=None,
    help="Only this tenant (default: every tenant).",
)
@click.option(
    "--since",
    type=click.DateTime(["%Y-%m-%d"]),
    default=None,
    help="Count usage, cost and logged searches from this day (UTC, YYYY-MM-DD) on.",
)
@json_option
@pass_state
def stats(state: CliState, tenant: str | None, since: datetime | None, as_json: bool) -> None:
    """Show per tenant: documents by state, chunks, the document queue, tokens, cost, the
    query-embedding cache hit rate and the answer cache's entries and hit rate.

    \b
    Tokens are recorded by pgrag ingest, pgrag reembed, the worker (document embeddings),
    pgrag search/ask/eval (query embeddings, cache hits) and pgrag ask (chat). Cost uses the
    operator's price list pgrag.model_prices (price per million input and output tokens; a
    local model is free unless listed):
      insert into pgrag.model_prices (provider, model, input_per_million, output_per_million)
      values ('openai', 'gpt-4o-mini', 0.15, 0.60);
    Exit status 3 when there is no tenant to show.
    """
    day: date | None = since.date() if since else None
    with connect(state.dsn()) as conn:
        tenants = tenant_stats(conn, tenant, day)
        usage = usage_costs(conn, tenant, day)
    if not tenants:
        if as_json:
            echo_json({"tenants": [], "usage": []})
        who = f"tenant {tenant!r} has" if tenant else "this database has"
        raise NothingToDo(f"{who} no documents, usage or logged searches yet.")
    if as_json:
        echo_json(
            {
                "since": day.isoformat() if day else None,
                "tenants": [t.as_dict() for t in tenants],
                "usage": [u.as_dict() for u in usage],
            }
        )
        return
    for n, t in enumerate(tenants):
        if n:
            click.echo()
        print_tenant(t, [u for u in usage if u.tenant_id == t.tenant_id])
