"""``pgrag search`` and ``pgrag ask``: options in, :func:`pgrag.search.run_search` /
:func:`pgrag.search.run_context` (and the answer step, :func:`pgrag.answer.answer_for_tenant`)
called, results rendered. No retrieval logic lives here."""

from __future__ import annotations

import math
import textwrap
from datetime import datetime
from typing import Any

import click

from pgrag import tracing
from pgrag.answer_cache import DEFAULT_SIMILARITY, ENV_CACHE, ENV_SIMILARITY
from pgrag.cli.answer_cache import CacheRequest, cache_settings, print_cached
from pgrag.cli.check import (
    CheckRequest,
    answer_to_check,
    check_options,
    print_check,
    refuse_context_only,
    run_check,
    withheld,
)
from pgrag.cli.common import (
    F,
    echo_json,
    json_object,
    json_option,
    literal,
    pass_state,
    tenant_option,
)
from pgrag.cli.rerank import rerank_options, rerank_settings
from pgrag.cli.state import CliState
from pgrag.errors import ConfigError, NothingToDo
from pgrag.highlight import Highlight, highlight, terminal_text
from pgrag.search import (
    FUSIONS,
    MODES,
    TYPO_MODES,
    Context,
    ContextOptions,
    SearchFilters,
    SearchHit,
    SearchOptions,
    SearchRun,
    run_context,
    run_search,
)

NOTHING_FOUND = "No relevant information found."
NO_ANSWER: dict[str, Any] = {"answer": None, "found": False, "context": "", "sources": []}
"""``ask --json`` when no source passes (or the tenant holds nothing)."""
DATE_FORMATS = ["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"]


def filter_options(func: F) -> F:
    """The filters every retrieval command shares (applied inside each search arm, in SQL)."""
    decorators = [
        click.option(
            "--document-id",
            "document_ids",
            type=int,
            multiple=True,
            help="Only chunks of this document (repeatable).",
        ),
        click.option(
            "--metadata",
            "metadata",
            metavar="JSON",
            callback=json_object,
            help="Only documents whose metadata contains this JSON object, "
            'e.g. \'{"team": "ops"}\'.',
        ),
        click.option(
            "--source-type",
            "source_types",
            type=click.Choice(["pdf", "markdown", "html", "text", "url"]),
            multiple=True,
            help="Only documents of this source type (repeatable).",
        ),
        click.option(
            "--after",
            type=click.DateTime(DATE_FORMATS),
            help="Only chunks created at or after this date (YYYY-MM-DD[THH:MM:SS]).",
        ),
        click.option(
            "--before",
            type=click.DateTime(DATE_FORMATS),
            help="Only chunks created before this date.",
        ),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def make_filters(
    document_ids: tuple[int, ...],
    metadata: dict[str, Any] | None,
    source_types: tuple[str, ...],
    after: datetime | None,
    before: datetime | None,
) -> SearchFilters:
    return SearchFilters(
        document_ids=list(document_ids) or None,
        metadata=metadata,
        source_types=list(source_types) or None,
        created_after=after,
        created_before=before,
    )


# -- search --------------------------------------------------------------------------------------


def _location(hit: SearchHit) -> str:
    parts = [hit.source_uri or "(no source)"]
    if hit.page is not None:
        parts.append(f"page {hit.page}")
    if hit.heading_path:
        parts.append(" > ".join(hit.heading_path))
    first, last = hit.first_chunk_index, hit.last_chunk_index
    if first is not None and last is not None and first != last:
        parts.append(f"chunks {first}–{last}")  # a window (--window): what the text spans
    else:
        parts.append(f"chunk {hit.chunk_index}")
    return " · ".join(parts)


def _snippet(content: str, width: int = 300) -> str:
    text = " ".join(content.split())
    return textwrap.shorten(text, width=width, placeholder=" …") if text else ""


def explain(hit: SearchHit, options: SearchOptions) -> str:
    """Why this source: each arm's rank and score, the fused score, and with a re-ranker its
    rank among the candidates, the rank it came from and its score."""

    def arm(name: str, rank: int | None, score: float | None, label: str) -> str:
        where = f"#{rank}" if rank is not None else "not among its candidates"
        return f"{name} {where}" + (f" ({label} {score:.4f})" if score is not None else "")

    vector = arm("vector", hit.vector_rank, hit.vector_score, "cosine similarity")
    keyword = arm("keyword", hit.keyword_rank, hit.keyword_score, "BM25")
    reranked = (
        f" -> re-ranked #{hit.rerank_rank} from #{hit.fused_rank} (score {hit.rerank_score:.4f})"
        if hit.rerank_score is not None
        else ""
    )
    if options.mode == "vector":
        return vector + reranked
    if options.mode == "keyword":
        return keyword + reranked
    fused = "RRF" if options.fusion == "rrf" else "weighted"  # SQL default: weighted
    return f"{vector}; {keyword} -> {fused} score {hit.score:.4f}{reranked}"


def print_hits(
    hits: list[SearchHit],
    options: SearchOptions,
    show_explain: bool,
    highlights: dict[int, Highlight] | None = None,
) -> None:
    for hit in hits:
        title = hit.title or "(untitled)"
        click.echo(f"{hit.rank}. {click.style(title, bold=True)}  (score {hit.score:.4f})")
        click.echo(f"   {_location(hit)}")
        marked = (highlights or {}).get(hit.chunk_id)
        if marked is not None:
            # Wrapped before the marks become escape codes, which would count as width.
            text = " ".join(marked.snippet.split())
            for line in textwrap.wrap(text, width=96, break_on_hyphens=False):
                click.echo(f"   {terminal_text(line)}")
        else:
            for line in textwrap.wrap(_snippet(hit.content), width=96):
                click.echo(f"   {line}")
        if show_explain:
            click.echo(f"   why: {explain(hit, options)}")
        click.echo()


def _a_number(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Refuse NaN, which no score is at least or below (the SQL functions refuse it too)."""
    if value is not None and math.isnan(value):
        raise click.BadParameter("must be a number, not NaN.")
    return value


def _checked(options: SearchOptions) -> SearchOptions:
    """``options`` once :meth:`SearchOptions.validate` accepted them; options that do not go
    together are a usage error (exit 2), like a bad value."""
    try:
        options.validate()
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    return options


def _not_blank(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Refuse an empty or blank query: it would only rank noise."""
    if not value.strip():
        raise click.BadParameter("must not be empty.")
    return value


@click.command()
@click.argument("query", callback=_not_blank)
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default="hybrid",
    show_default=True,
    help="hybrid fuses BM25 and vector search; vector or keyword run one arm.",
)
@click.option("-k", "--limit", type=click.IntRange(min=1), default=10, show_default=True)
@click.option(
    "--window",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Expand each hit with N neighbouring chunks of its document (hybrid).",
)
@click.option(
    "--mmr",
    "mmr_lambda",
    type=click.FloatRange(0, 1),
    help="Diversify results with MMR; lambda 1 = pure relevance, 0 = pure diversity (hybrid).",
)
@click.option(
    "--fusion",
    type=click.Choice(FUSIONS),
    default=None,
    help="How hybrid search fuses its arms: weighted min-max scores (the default; keyword 1, "
    "vector 0.8), weighted z-scores (zscore) or reciprocal rank fusion (rrf, k 60).",
)
@click.option(
    "--min-score",
    type=float,
    callback=_a_number,
    help="Drop results whose cosine similarity to the query is below this (vector, hybrid).",
)
@click.option("--language", help="Text-search configuration of the query (english, simple, ...).")
@click.option("--explain", "show_explain", is_flag=True, help="Show each arm's rank and score.")
@rerank_options
@click.option(
    "--highlight",
    "with_highlights",
    is_flag=True,
    help="Show a snippet of each hit with the query's words marked (--json: snippet and "
    "matches, character offsets in content).",
)
@click.option(
    "--page",
    type=click.IntRange(min=1),
    help="Page N of --limit rows (rows (N-1)*limit+1 to N*limit of the same ranking).",
)
@click.option(
    "--offset",
    type=click.IntRange(0, 1000),
    help="Skip the first N rows of the ranking (--json then prints next_offset).",
)
@click.option(
    "--typos",
    type=click.Choice(TYPO_MODES),
    default="off",
    show_default=True,
    help="Words of QUERY the tenant's documents never use: 'suggest' shows the closest words "
    "of its vocabulary (did you mean), 'fix' searches with them instead.",
)
@filter_options
@tenant_option()
@json_option
@pass_state
@tracing.command("pgrag search")
def search(
    state: CliState,
    query: str,
    mode: str,
    limit: int,
    window: int,
    mmr_lambda: float | None,
    fusion: str | None,
    min_score: float | None,
    language: str | None,
    show_explain: bool,
    rerank_spec: str | None,
    rerank_top: int,
    with_highlights: bool,
    page: int | None,
    offset: int | None,
    typos: str,
    document_ids: tuple[int, ...],
    metadata: dict[str, Any] | None,
    source_types: tuple[str, ...],
    after: datetime | None,
    before: datetime | None,
    tenant: str,
    as_json: bool,
) -> None:
    """Search the ingested documents for QUERY and show the best chunks with their sources.

    \b
    The query embedding comes from the query-embedding cache when the same query (normalised)
    was embedded before for this tenant and model; otherwise the model embeds it and it is
    cached. Cache hits and model calls count as usage (pgrag stats); the search is logged when
    the operator turned the search log on (pgrag.settings.search_log).
    """
    options = _checked(
        SearchOptions(
            mode=literal(mode, MODES),
            limit=limit,
            fusion=None if fusion is None else literal(fusion, FUSIONS),
            window=window,
            mmr_lambda=mmr_lambda,
            min_score=min_score,
            language=language,
            filters=make_filters(document_ids, metadata, source_types, after, before),
            offset=page_offset(page, offset, limit),
        )
    )
    reranking = rerank_settings(rerank_spec, rerank_top)
    highlights: dict[int, Highlight] = {}
    with state.connect_read_and_write() as (conn, writer):
        run = run_search(
            conn,
            query,
            options,
            tenant=tenant,
            writer=writer,
            reranking=reranking,
            typos=literal(typos, TYPO_MODES),
        )
        if with_highlights and run.hits:
            ids = [hit.chunk_id for hit in run.hits]
            searched = run.searched or query
            highlights = highlight(conn, ids, searched, tenant=tenant, language=language)
    # --json: a bare list of hits, or an object when pages or typos add their keys.
    wrapped = page is not None or offset is not None or run.suggestion is not None
    if run.tenant_empty:
        if as_json:
            echo_json(search_json(run, [], options) if wrapped else [])
        raise NothingToDo(run.tenant_empty)
    if as_json:
        hits = [hit_json(hit, highlights.get(hit.chunk_id)) for hit in run.hits]
        echo_json(search_json(run, hits, options) if wrapped else hits)
        return
    print_typos(run, query)
    if not run.hits:
        click.echo(NOTHING_FOUND)
        return
    print_hits(run.hits, options, show_explain, highlights)


def search_json(run: SearchRun, hits: list[dict[str, Any]], options: SearchOptions) -> Any:
    """``{"hits": [...], "offset", "next_offset"}`` and, with --typos, the query, the text
    searched and the corrections."""
    # A full page may have a next one; a short page is the last.
    more = len(hits) == options.limit
    out: dict[str, Any] = {
        "hits": hits,
        "offset": options.offset,
        "next_offset": options.offset + options.limit if more else None,
    }
    if run.suggestion is not None:
        out |= run.suggestion.as_dict() | {"searched_query": run.searched}
    return out


def print_typos(run: SearchRun, query: str) -> None:
    """One line before the hits when --typos found a correction: the suggestion, or what was
    searched instead."""
    if run.suggestion is None or not run.suggestion.changed:
        return
    if run.searched != query:
        click.echo(f"Searched for: {run.searched} (corrected from: {query})")
    else:
        click.echo(f"Did you mean: {run.suggestion.suggested_query}")


def page_offset(page: int | None, offset: int | None, limit: int) -> int:
    """The rows a page skips: --offset, or (--page - 1) x --limit; not both."""
    if page is not None and offset is not None:
        raise click.UsageError("use --page or --offset, not both.")
    if page is not None:
        return (page - 1) * limit
    return offset or 0


def hit_json(hit: SearchHit, marked: Highlight | None) -> dict[str, Any]:
    """A hit for --json; with --highlight, its snippet and matches too."""
    out = hit.as_dict()
    if marked is not None:
        out["snippet"] = marked.snippet
        out["matches"] = marked.matches
    return out


# -- ask -----------------------------------------------------------------------------------------


def source_line(n: int, source: dict[str, Any]) -> str:
    """``[Source N] title — uri, page P, heading (score S)`` from one ``build_context`` source."""
    label = source.get("label") or f"Source {source.get('source', n)}"
    label = label if str(label).startswith("[") else f"[{label}]"
    title = source.get("title") or "(untitled)"
    details = [str(source.get("source_uri") or source.get("uri") or "")]
    if source.get("page") is not None:
        details.append(f"page {source['page']}")
    heading = source.get("heading_path") or source.get("heading")
    if heading:
        details.append(" > ".join(heading) if isinstance(heading, list) else str(heading))
    score = source.get("score")
    tail = f" (score {float(score):.4f})" if isinstance(score, int | float) else ""
    return f"{label} {title} — {', '.join(d for d in details if d)}{tail}"


def print_sources(ctx: Context) -> None:
    click.echo("Sources:")
    for n, source in enumerate(ctx.sources, 1):
        click.echo(f"  {source_line(n, source)}")


@click.command()
@click.argument("question", callback=_not_blank)
@click.option(
    "-k", "--limit", type=click.IntRange(min=1), help="Chunks to consider (SQL default 8)."
)
@click.option(
    "--token-budget", type=click.IntRange(min=1), help="Context size in tokens (SQL default 2000)."
)
@click.option(
    "--min-score",
    type=float,
    callback=_a_number,
    help="Minimum cosine similarity of a source to the question (SQL default 0.3; -1 for "
    "none); when none passes, print 'No relevant information found.' without calling the LLM.",
)
@click.option("--window", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--mmr", "mmr_lambda", type=click.FloatRange(0, 1), help="MMR lambda (diversity).")
@click.option(
    "--chat-model",
    envvar="PGRAG_CHAT_MODEL",
    help="Chat model of the OpenAI-compatible endpoint (env PGRAG_CHAT_MODEL; gpt-4o-mini).",
)
@click.option(
    "--context-only", is_flag=True, help="Print the context and sources; do not call the LLM."
)
@click.option(
    "--cache/--no-cache",
    "use_cache",
    envvar=ENV_CACHE,
    default=False,
    show_default=True,
    help="Semantic answer cache: reuse this tenant's earlier answer to a question that means "
    "the same (within --cache-similarity, under the same settings, its sources unchanged), "
    "skipping retrieval and the chat call; else answer and cache the answer (env "
    "PGRAG_ANSWER_CACHE=on).",
)
@click.option(
    "--cache-similarity",
    type=click.FloatRange(0, 1),
    envvar=ENV_SIMILARITY,
    default=DEFAULT_SIMILARITY,
    show_default=True,
    help="Cosine similarity of the question to a cached question for --cache to reuse its "
    "answer (env PGRAG_ANSWER_CACHE_SIMILARITY).",
)
@check_options
@rerank_options
@filter_options
@tenant_option()
@json_option
@pass_state
@tracing.command("pgrag ask")
def ask(
    state: CliState,
    question: str,
    limit: int | None,
    token_budget: int | None,
    min_score: float | None,
    window: int,
    mmr_lambda: float | None,
    chat_model: str | None,
    context_only: bool,
    use_cache: bool,
    cache_similarity: float,
    check: CheckRequest | None,
    rerank_spec: str | None,
    rerank_top: int,
    document_ids: tuple[int, ...],
    metadata: dict[str, Any] | None,
    source_types: tuple[str, ...],
    after: datetime | None,
    before: datetime | None,
    tenant: str,
    as_json: bool,
) -> None:
    """Answer QUESTION from the ingested documents, citing [Source N].

    The context comes from build_context in SQL. With an OpenAI-compatible chat endpoint
    configured (OPENAI_API_KEY and/or OPENAI_BASE_URL) the answer is generated from those
    sources only; without one, the context and sources are printed.

    With --check, each sentence of the answer must cite a [Source N] that supports it, as
    judged by the chat endpoint (llm) or the local embedding model (local); an answer whose
    confidence is below --min-confidence is withheld with the reason, exit status 4.

    With --cache (off by default), an answer this tenant got before to a question within
    --cache-similarity, under the same settings and from sources that have not changed, is
    printed again without retrieval or chat call; a new answer is cached (not one --check
    withheld).
    """
    from pgrag.answer import ChatConfig, answer_for_tenant

    refuse_context_only(check, context_only)
    options = ContextOptions(
        token_budget=token_budget,
        limit=limit,
        min_score=min_score,
        window=window,
        mmr_lambda=mmr_lambda,
        filters=make_filters(document_ids, metadata, source_types, after, before),
    )
    reranking = rerank_settings(rerank_spec, rerank_top)
    config = None if context_only else ChatConfig.from_env(chat_model)
    given = answer_to_check(check, config)
    # The cache holds the chat model's answers: none to reuse or keep without one, or for an
    # answer given with --answer.
    cache = None
    if use_cache and config is not None and given is None:
        cache = CacheRequest(
            cache_settings(config, options, rerank_spec, rerank_top, check), cache_similarity
        )
    with state.connect_read_and_write() as (conn, writer):
        hit = cache.look_up(writer, question, tenant) if cache else None
        if hit is None:
            run = run_context(
                conn,
                question,
                options,
                tenant=tenant,
                writer=writer,
                reranking=reranking,
                queries=cache.queries if cache else None,
            )
    if hit is not None:
        print_cached(hit, config, as_json)
        return
    ctx = run.context
    if run.tenant_empty:
        if as_json:
            echo_json(NO_ANSWER)
        raise NothingToDo(run.tenant_empty)
    if ctx.empty:
        if as_json:
            echo_json(NO_ANSWER)
        else:
            click.echo(NOTHING_FOUND)
        return
    text = given
    if text is None and config is not None:
        text = answer_for_tenant(question, ctx.context, config, tenant=tenant, dsn=state.dsn())
    checked = None
    if check is not None and text is not None:
        checked = run_check(
            check,
            question,
            text,
            ctx.context,
            config,
            tenant=tenant,
            dsn=state.dsn(),
            scorer=reranking.reranker if reranking is not None else None,
        )
    if cache is not None and text is not None and not (checked and checked.withheld):
        cache.store(state.dsn(), tenant, question, text, ctx.sources)
    if as_json:
        echo_json(
            {
                "answer": None if checked and checked.withheld else text,
                "found": True,
                **({"cached": False} if cache is not None else {}),
                "chat_model": config.model if config and given is None else None,
                "context": ctx.context,
                "sources": ctx.sources,
                **({"check": checked.as_dict()} if checked else {}),
            }
        )
    if checked is not None and checked.withheld:
        raise withheld(checked)
    if as_json:
        return
    if text is not None:
        click.echo(text)
        click.echo()
        if checked is not None:
            print_check(checked)
            click.echo()
        print_sources(ctx)
        return
    if not context_only:
        click.echo(
            "No chat endpoint is configured (set OPENAI_API_KEY, or OPENAI_BASE_URL for a "
            "compatible server), so here is the context an LLM would answer from:"
        )
        click.echo()
    click.echo(ctx.context)
    click.echo()
    print_sources(ctx)
