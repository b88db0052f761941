"""The offline checker: support measured with local models, no endpoint called.

A cited sentence is supported when it is close enough to the best-matching passage of the
sources it cites: a sentence of the source, or two adjacent ones (a claim often joins them).
Closeness is the cosine similarity of the bundled embedding model's vectors, or, when a
cross-encoder is given (anything with ``score(query, documents)``, such as a re-ranker), that
model's score of (sentence, passage). It is a check of topic, not of facts: it catches sentences
about something the cited source does not discuss and citations of the wrong source, but not a
changed number or name in a sentence on the source's subject (the LLM checker can).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from pgrag.check.sentences import AnswerSentence, split_text
from pgrag.check.verdicts import SentenceVerdict, citation_problem
from pgrag.errors import CheckFailed
from pgrag.openai_errors import one_line

DEFAULT_MIN_SUPPORT = 0.55
"""Cosine similarity (all-MiniLM-L6-v2) at which a passage supports a sentence. In the tests,
the documented examples and a small hand-written probe, paraphrases of a source's sentences
scored 0.57-0.96, sentences on another subject or citing the wrong source 0.01-0.52."""


class SentenceEmbedder(Protocol):
    """What the checker needs of an embedding model (pgrag's ``LocalEmbedder``)."""

    model_name: str
    tokens_used: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class SupportScorer(Protocol):
    """A cross-encoder: scores how well each document answers (here: supports) the query.

    Re-rankers have this shape; their scores must be on the scale of ``min_support``."""

    name: str

    def score(self, query: str, documents: Sequence[str]) -> list[float]: ...


@dataclass(frozen=True)
class LocalChecker:
    """The offline checker's models and threshold."""

    embedder: SentenceEmbedder
    min_support: float = DEFAULT_MIN_SUPPORT
    scorer: SupportScorer | None = None

    @property
    def model(self) -> str:
        return self.scorer.name if self.scorer is not None else self.embedder.model_name


def passages(text: str) -> list[str]:
    """The passages a sentence is compared with: each sentence of ``text``, and each pair of
    adjacent sentences."""
    sentences = split_text(text)
    pairs = [f"{a} {b}" for a, b in itertools.pairwise(sentences)]
    return sentences + pairs


def _cited_passages(sources: tuple[int, ...], texts: dict[int, str]) -> list[tuple[int, str]]:
    return [(n, p) for n in sources for p in passages(texts.get(n, ""))]


Vectors = dict[str, np.ndarray]


def embed_all(embedder: SentenceEmbedder, texts: list[str]) -> Vectors:
    """The unit vector of each distinct text, in one call of the model."""
    distinct = list(dict.fromkeys(texts))
    return dict(zip(distinct, embedder.embed(distinct), strict=True)) if distinct else {}


def _scores(
    checker: LocalChecker, claim: str, candidates: list[str], vectors: Vectors
) -> list[float]:
    """Support of ``claim`` by each candidate passage: the cross-encoder's score when there is
    one, else cosine similarity (``vectors`` holds the claim's and the passages' vectors)."""
    if checker.scorer is None:
        return [float(vectors[c] @ vectors[claim]) for c in candidates]
    scores = [float(s) for s in checker.scorer.score(claim, candidates)]
    if len(scores) != len(candidates):
        raise CheckFailed(
            f"the cross-encoder {checker.scorer.name} returned {len(scores)} scores for "
            f"{len(candidates)} passages."
        )
    if not all(math.isfinite(s) for s in scores):
        raise CheckFailed(
            f"the cross-encoder {checker.scorer.name} returned a score that is not a number."
        )
    return scores


def verdict(
    checker: LocalChecker, sentence: AnswerSentence, texts: dict[int, str], vectors: Vectors
) -> SentenceVerdict:
    """Whether the sources ``sentence`` cites support it (``texts``: source text by number)."""
    if sentence.exempt:
        return SentenceVerdict(sentence.text, sentence.sources, True, None, "exempt", True)
    problem = citation_problem(sentence.sources, len(texts))
    if problem is not None:
        return SentenceVerdict(sentence.text, sentence.sources, False, None, problem)
    candidates = _cited_passages(sentence.sources, texts)
    if not candidates:
        return SentenceVerdict(
            sentence.text, sentence.sources, False, None, "the cited sources hold no text"
        )
    scores = _scores(checker, sentence.claim, [p for _, p in candidates], vectors)
    best = int(np.argmax(scores))
    number, passage = candidates[best]
    supported = scores[best] >= checker.min_support
    relation = "at least" if supported else "below"
    reason = one_line(
        f"best match in [Source {number}] scores {scores[best]:.2f}, {relation} "
        f"{checker.min_support:g}: {passage!r}"
    )
    return SentenceVerdict(sentence.text, sentence.sources, supported, scores[best], reason)


def local_verdicts(
    checker: LocalChecker, sentences: list[AnswerSentence], texts: dict[int, str]
) -> list[SentenceVerdict]:
    """The verdict of every sentence of an answer (with the embedding model, every claim and
    passage embedded in one call)."""
    vectors: Vectors = {}
    if checker.scorer is None:
        wanted = [s for s in sentences if not s.exempt and s.sources]
        texts_needed = [s.claim for s in wanted] + [
            p for s in wanted for _, p in _cited_passages(s.sources, texts)
        ]
        vectors = embed_all(checker.embedder, texts_needed)
    return [verdict(checker, s, texts, vectors) for s in sentences]
