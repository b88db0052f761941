"""The semantic answer cache for ``pgrag ask``: a client of ``public.answer_cache_lookup`` and
``public.answer_cache_store`` (``sql/idempotent/053-answer-cache.sql``).

What matches, when an entry is stale, the bound per tenant and the counters are SQL's; this
module only describes the settings an answer is made under (:func:`answer_settings`: an answer
is reused only under the same ones), passes the question's embedding and turns rows into a
:class:`CachedAnswer`. Like the query-embedding cache, it never fails the command: a database
without the cache, or a failing call, turns the cache off for the command (one warning).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from pgrag.db import one_line, tenant_transaction
from pgrag.query_cache import QueryEmbeddings
from pgrag.usage import warn

DEFAULT_SIMILARITY = 0.95
"""Cosine similarity a new question must have to a cached one (``pgrag ask --cache``): measured
on paraphrases and different questions about the sample documents with the bundled model
(``benchmarks/answer_cache.py``, docs/benchmarks.md, "Semantic answer cache")."""

ENV_CACHE = "PGRAG_ANSWER_CACHE"
ENV_SIMILARITY = "PGRAG_ANSWER_CACHE_SIMILARITY"


@dataclass(frozen=True)
class CachedAnswer:
    """An answer the cache returned: the question it answered and how close the new one is."""

    entry_id: int
    cached_question: str
    answer: str
    similarity: float
    sources: list[dict[str, Any]]
    created_at: datetime
    hit_count: int


def answer_settings(
    *,
    chat_model: str,
    endpoint: str,
    system_prompt: str,
    retrieval: dict[str, Any],
    check: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What an answer is made under besides the question: the chat model and endpoint, the
    prompt (by its SHA-256, so a new prompt makes new answers), the retrieval options (limit,
    budget, floor, window, MMR, filters, re-ranker) and the check. Unset values are left out,
    so that the default spelled out and the default omitted are the same settings."""
    settings: dict[str, Any] = {
        "chat_model": chat_model,
        "endpoint": endpoint,
        "prompt": hashlib.sha256(system_prompt.encode()).hexdigest()[:16],
        "retrieval": {k: v for k, v in retrieval.items() if v not in (None, [], {}, ())},
    }
    if check is not None:
        settings["check"] = check
    # Through JSON so that dates and tuples are what the database will compare.
    return dict(json.loads(json.dumps(settings, default=str, sort_keys=True)))


class AnswerCache:
    """The answer cache of ``tenant`` on ``primary`` (lookups count and remove stale
    entries: they write, so they go to the primary, as the query-embedding cache's writes)."""

    def __init__(self, primary: psycopg.Connection[Any], tenant: str) -> None:
        self.primary = primary
        self.tenant = tenant
        self.enabled = True

    def _rows(self, query: str, args: dict[str, Any]) -> list[dict[str, Any]]:
        """One cache statement as the tenant; no rows (and the cache off) when it fails."""
        if not self.enabled:
            return []
        try:
            with (
                tenant_transaction(self.primary, self.tenant),
                self.primary.cursor(row_factory=dict_row) as cur,
            ):
                return cur.execute(query, args).fetchall()
        except psycopg.Error as exc:
            self.enabled = False
            if not isinstance(
                exc, psycopg.errors.UndefinedFunction | psycopg.errors.UndefinedTable
            ):
                warn(
                    "answer cache off for this command "
                    f"({one_line(exc.diag.message_primary or str(exc)) or type(exc).__name__})"
                )
            else:
                warn("answer cache off: this database has no answer cache (run pgrag migrate)")
            return []

    def lookup(
        self, embedding: np.ndarray, settings: dict[str, Any], min_similarity: float
    ) -> CachedAnswer | None:
        """The cached answer to a question within ``min_similarity`` of ``embedding``, made
        under ``settings`` from sources that have not changed since; else None."""
        rows = self._rows(
            "select * from public.answer_cache_lookup(question_embedding => %(e)s, "
            "settings => %(s)s, min_similarity => %(m)s)",
            {"e": embedding, "s": Jsonb(settings), "m": min_similarity},
        )
        if not rows:
            return None
        row = rows[0]
        sources = row["sources"]
        if isinstance(sources, str):
            sources = json.loads(sources)
        return CachedAnswer(
            entry_id=int(row["entry_id"]),
            cached_question=row["cached_question"],
            answer=row["answer"],
            similarity=float(row["similarity"]),
            sources=list(sources or []),
            created_at=row["created_at"],
            hit_count=int(row["hit_count"]),
        )

    def store(
        self,
        question: str,
        embedding: np.ndarray,
        answer: str,
        sources: list[dict[str, Any]],
        settings: dict[str, Any],
    ) -> int | None:
        """Cache ``answer`` to ``question``; its id, or None when SQL stored nothing (no
        tenant, a source gone meanwhile, the operator's bound 0) or the cache is off."""
        rows = self._rows(
            "select public.answer_cache_store(question => %(q)s, question_embedding => %(e)s, "
            "answer => %(a)s, sources => %(src)s, settings => %(s)s) as entry_id",
            {
                "q": question,
                "e": embedding,
                "a": answer,
                "src": Jsonb(sources),
                "s": Jsonb(settings),
            },
        )
        entry = rows[0]["entry_id"] if rows else None
        return None if entry is None else int(entry)


class QuestionEmbeddings(QueryEmbeddings):
    """Query embeddings that remember the texts they embedded in this command: the question
    the answer cache looked up is then neither asked of the query-embedding cache again nor
    counted twice when retrieval embeds it. A model switch forgets them."""

    def __init__(self, primary: psycopg.Connection[Any], tenant: str) -> None:
        super().__init__(primary, tenant)
        self.known: dict[str, np.ndarray] = {}

    def embed_many(self, texts: Sequence[str]) -> list[np.ndarray]:
        missing = [t for t in texts if t not in self.known]
        if missing:
            for text, vector in zip(missing, super().embed_many(missing), strict=True):
                self.known[text] = vector
        return [self.known[t] for t in texts]

    def switch_to_database_model(self) -> None:
        self.known.clear()
        super().switch_to_database_model()
