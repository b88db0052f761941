"""``pgrag ask --cache``: the settings an answer is cached under, the lookup before retrieval,
the store after the answer, and how a cached answer is printed. The cache itself is SQL's
(:mod:`pgrag.answer_cache`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click
import numpy as np
import psycopg

from pgrag.answer import SYSTEM_PROMPT, ChatConfig
from pgrag.answer_cache import AnswerCache, CachedAnswer, QuestionEmbeddings, answer_settings
from pgrag.cli.common import echo_json
from pgrag.db import connect
from pgrag.errors import PgragError
from pgrag.search import Context, ContextOptions
from pgrag.usage import warn

if TYPE_CHECKING:
    from pgrag.cli.check import CheckRequest


def cache_settings(
    config: ChatConfig,
    options: ContextOptions,
    rerank_spec: str | None,
    rerank_top: int,
    check: CheckRequest | None,
) -> dict[str, Any]:
    """The settings ``ask`` makes an answer under (:func:`pgrag.answer_cache.answer_settings`):
    an answer is reused only under the same chat model, endpoint, retrieval options, filters,
    re-ranker and check."""
    filters = options.filters
    retrieval = {
        "limit": options.limit,
        "token_budget": options.token_budget,
        "min_score": options.min_score,
        "window": options.window or None,
        "mmr": options.mmr_lambda,
        "rerank": rerank_spec,
        "rerank_top": rerank_top if rerank_spec else None,
        "document_ids": sorted(filters.document_ids or []),
        "metadata": filters.metadata,
        "source_types": sorted(filters.source_types or []),
        "after": filters.created_after,
        "before": filters.created_before,
    }
    checked = None
    if check is not None:
        checked = {
            "checker": check.checker,
            "min_confidence": check.min_confidence,
            "min_support": check.min_support,
            "judge_model": check.judge_model,
        }
    return answer_settings(
        chat_model=config.model,
        endpoint=config.endpoint,
        system_prompt=SYSTEM_PROMPT,
        retrieval=retrieval,
        check=checked,
    )


@dataclass
class CacheRequest:
    """One ``ask --cache``: the settings and similarity asked for, and once looked up, the
    question's embedding (kept to store the answer under it)."""

    settings: dict[str, Any]
    min_similarity: float
    queries: QuestionEmbeddings | None = None
    vector: np.ndarray | None = None

    def look_up(
        self, writer: psycopg.Connection[Any], question: str, tenant: str
    ) -> CachedAnswer | None:
        """Embed ``question`` (through the query-embedding cache) and look it up; retrieval
        then reuses :attr:`queries`, so the question is embedded and counted once."""
        self.queries = QuestionEmbeddings(writer, tenant)
        self.vector = self.queries.embed(question)
        hit = AnswerCache(writer, tenant).lookup(self.vector, self.settings, self.min_similarity)
        if hit is not None:
            self.queries.record_usage()  # no retrieval follows to record it
        return hit

    def store(
        self, dsn: str, tenant: str, question: str, answer: str, sources: list[dict[str, Any]]
    ) -> int | None:
        """Cache ``answer`` (on the primary ``dsn`` names); never fails the command."""
        if self.vector is None:
            return None
        try:
            with connect(dsn) as conn:
                return AnswerCache(conn, tenant).store(
                    question, self.vector, answer, sources, self.settings
                )
        except PgragError as exc:
            warn(f"answer not cached ({exc})")
            return None


def print_cached(hit: CachedAnswer, config: ChatConfig | None, as_json: bool) -> None:
    """A cached answer: ``--json`` with ``cached: true`` and the similarity; else the answer,
    a line saying it came from the cache, and its sources."""
    from pgrag.cli.search import print_sources

    if as_json:
        echo_json(
            {
                "answer": hit.answer,
                "found": True,
                "cached": True,
                "similarity": hit.similarity,
                "cached_question": hit.cached_question,
                "cached_at": hit.created_at.isoformat(),
                "chat_model": config.model if config else None,
                "context": None,
                "sources": hit.sources,
            }
        )
        return
    click.echo(hit.answer)
    click.echo()
    click.echo(
        f"(Cached answer to {hit.cached_question!r}, similarity {hit.similarity:.3f}, "
        f"from {hit.created_at:%Y-%m-%d %H:%M %Z}: no retrieval or chat call was made.)"
    )
    click.echo()
    print_sources(Context("", hit.sources))
