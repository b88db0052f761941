"""Answer metrics of a golden set (RAGAS-style), judged by the OpenAI-compatible chat endpoint.

For each question the context is built exactly as ``pgrag ask`` builds it
(:func:`pgrag.search.run_context`, with the same options and re-ranker), the answer is
generated from it with ``pgrag ask``'s grounded prompt (:func:`pgrag.answer.grounded_messages`),
then one judge request per metric scores it (:mod:`pgrag.eval.judges`). Every chat call's tokens
(answer and judges) are recorded as the tenant's ``chat`` usage, as ``pgrag ask --check llm``
records its judge's; the query model's tokens (the question, and the questions the relevance
judge wrote) as its ``query`` usage.

A question whose context is empty is answered "No relevant information found." as ``pgrag
ask`` does, without a chat call: faithfulness is not scored (no claim), answer relevance and
context precision are 0, context recall 0 when it has a reference answer. A failure of the
chat endpoint or a reply that breaks its prompt's format fails that question's answer metrics
alone (:class:`AnswerResult` with ``error``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg

from pgrag.errors import PgragError
from pgrag.eval import judges
from pgrag.eval.golden import GoldenQuestion
from pgrag.search import ContextOptions, run_context
from pgrag.usage import Usage

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

    from pgrag.answer import ChatConfig
    from pgrag.pipeline.embedders import Embedder
    from pgrag.rerank import RerankSettings

ANSWER_METRICS = ("faithfulness", "answer_relevance", "context_precision", "context_recall")
NOTHING_FOUND = "No relevant information found."

Record = Callable[[str, Usage], object]
"""Called with a tenant and one model call's usage, as soon as it returns."""


@dataclass
class AnswerResult:
    """One question's answer, its scores (None: not scored) or the error that failed them."""

    question: GoldenQuestion
    answer: str | None = None
    sources: list[str] = field(default_factory=list)
    scores: dict[str, float | None] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        scores = {m: None if v is None else round(v, 4) for m, v in self.scores.items()}
        return {
            "answer": self.answer,
            "sources": self.sources,
            **scores,
            **({"judged": self.details} if self.details else {}),
            "error": self.error,
        }


@dataclass(frozen=True)
class AnswerSetup:
    """Where answers come from and who judges them."""

    chat: ChatConfig
    judge: ChatConfig
    embedder: Embedder
    options: ContextOptions = field(default_factory=ContextOptions)
    reranking: RerankSettings | None = None


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b)) / norm if norm else 0.0


class _Judging:
    """The chat calls of one question, each one's usage recorded for its tenant."""

    def __init__(self, setup: AnswerSetup, tenant: str, record: Record) -> None:
        self.setup, self.tenant, self.record = setup, tenant, record

    def ask(
        self, messages: list[ChatCompletionMessageParam], config: ChatConfig, *, judging: bool
    ) -> str:
        from pgrag.answer import complete
        from pgrag.check.judge import ask_judge

        reply = ask_judge(messages, config) if judging else complete(messages, config)
        usage = Usage("chat", "openai", config.model, reply.input_tokens, reply.output_tokens)
        self.record(self.tenant, usage)
        return reply.text

    def judge(self, messages: list[ChatCompletionMessageParam]) -> str:
        return self.ask(messages, self.setup.judge, judging=True)


def _relevance(
    q: GoldenQuestion,
    relevance: judges.Relevance,
    writer: psycopg.Connection[Any],
    setup: AnswerSetup,
) -> float:
    """0 for a noncommittal answer, else the mean cosine similarity (floored at 0) of the
    judge's questions to the question asked, embedded by the query model."""
    from pgrag.query_cache import QueryEmbeddings

    if relevance.noncommittal:
        return 0.0
    queries = QueryEmbeddings(writer, q.tenant, setup.embedder, use_cache=False)
    asked, *written = queries.embed_many([q.question, *relevance.questions])
    queries.record_usage()
    return float(np.mean([max(0.0, _cosine(asked, w)) for w in written]))


def _judge_answer(
    q: GoldenQuestion,
    context: str,
    sources: int,
    text: str,
    calls: _Judging,
    writer: psycopg.Connection[Any],
) -> tuple[dict[str, float | None], dict[str, Any]]:
    """The four scores of an answer given its context, and what the judges said."""
    claims = judges.parse_claims(
        calls.judge(judges.faithfulness_messages(q.question, context, text)), "faithfulness"
    )
    relevance = judges.parse_relevance(calls.judge(judges.relevance_messages(text)))
    basis = q.reference_answer or text
    useful = judges.parse_useful(
        calls.judge(judges.precision_messages(q.question, context, basis, sources)), sources
    )
    scores: dict[str, float | None] = {
        "faithfulness": judges.claims_score(claims),
        "answer_relevance": _relevance(q, relevance, writer, calls.setup),
        "context_precision": judges.average_precision(useful),
        "context_recall": None,
    }
    details: dict[str, Any] = {
        "unsupported_claims": [c.claim for c in claims if not c.supported],
        "claims": len(claims),
        "noncommittal": relevance.noncommittal,
        "useful_sources": useful,
    }
    if q.reference_answer is not None:
        recall = judges.parse_claims(
            calls.judge(judges.recall_messages(q.question, context, q.reference_answer)),
            "context_recall",
        )
        scores["context_recall"] = judges.claims_score(recall)
        details["reference_claims_unsupported"] = [c.claim for c in recall if not c.supported]
    return scores, details


def evaluate_answer(
    conn: psycopg.Connection[Any],
    writer: psycopg.Connection[Any],
    q: GoldenQuestion,
    setup: AnswerSetup,
    record: Record,
) -> AnswerResult:
    """One question answered from ``pgrag ask``'s context and judged; a chat failure or a
    malformed judge reply is the result's ``error``, never an exception."""
    from pgrag.answer import grounded_messages

    run = run_context(
        conn, q.question, setup.options, tenant=q.tenant, writer=writer, reranking=setup.reranking
    )
    ctx = run.context
    result = AnswerResult(q, sources=[str(s.get("source_uri") or "") for s in ctx.sources])
    if ctx.empty:
        result.answer = NOTHING_FOUND
        result.scores = {
            "faithfulness": None,
            "answer_relevance": 0.0,
            "context_precision": 0.0,
            "context_recall": 0.0 if q.reference_answer is not None else None,
        }
        return result
    calls = _Judging(setup, q.tenant, record)
    try:
        result.answer = calls.ask(
            grounded_messages(q.question, ctx.context), setup.chat, judging=False
        )
        result.scores, result.details = _judge_answer(
            q, ctx.context, len(ctx.sources), result.answer, calls, writer
        )
    except PgragError as exc:
        result.error = str(exc)
        result.scores = dict.fromkeys(ANSWER_METRICS)
    return result


def judge_config(chat: ChatConfig, model: str | None) -> ChatConfig:
    """The judge's endpoint: the chat endpoint, with ``model`` when given."""
    return dataclasses.replace(chat, model=model) if model else chat
