"""The re-ranker's contract and the step that re-orders search hits by its scores.

A :class:`Reranker` scores documents against a query: one float per document, in the order
given, higher meaning more relevant. :func:`rerank` puts search hits in the order of those
scores, keeping what the search said about each hit (each arm's rank and score, the fused
score, the fused rank) beside the re-ranker's score and rank.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pgrag.errors import RerankError

if TYPE_CHECKING:
    from pgrag.search import SearchHit

DEFAULT_RERANK_TOP = 50
"""Candidates fetched and re-ranked per query (the common "retrieve 50, keep the top few")."""
MAX_RERANK_TOP = 1000
"""At most this many candidates (what the SQL search functions return at most)."""


@runtime_checkable
class Reranker(Protocol):
    """Scores documents for a query: ``score`` returns one float per document, same order."""

    name: str

    def score(self, query: str, documents: Sequence[str]) -> list[float]: ...


def checked_scores(name: str, scores: Sequence[float], count: int) -> list[float]:
    """``scores`` as floats once there is one finite score per document (else RerankError)."""
    if len(scores) != count:
        raise RerankError(
            f"re-ranker {name} returned {len(scores)} scores for {count} documents: "
            "check that it is a re-rank model or API."
        )
    values = [float(s) for s in scores]
    if not all(math.isfinite(v) for v in values):
        raise RerankError(f"re-ranker {name} returned a score that is not a finite number.")
    return values


def rerank(hits: Sequence[SearchHit], scores: Sequence[float], top_n: int) -> list[SearchHit]:
    """The ``top_n`` best ``hits`` by ``scores`` (one per hit), ranked 1..n.

    Ties keep the search's order (a stable sort on the hits as given), so the result is
    deterministic. Each hit keeps its arms' ranks and scores and its fused ``score``; its
    ``fused_rank`` is the rank the search gave it, ``rank`` and ``rerank_rank`` its new rank,
    ``rerank_score`` the re-ranker's score."""
    if len(scores) != len(hits):
        raise RerankError(f"{len(scores)} re-rank scores for {len(hits)} hits.")
    if top_n < 1:
        raise RerankError("the number of re-ranked hits to keep must be at least 1.")
    order = sorted(range(len(hits)), key=lambda i: -float(scores[i]))
    return [
        replace(
            hits[i],
            rank=new_rank,
            fused_rank=hits[i].fused_rank if hits[i].fused_rank is not None else hits[i].rank,
            rerank_rank=new_rank,
            rerank_score=float(scores[i]),
        )
        for new_rank, i in enumerate(order[:top_n], 1)
    ]
