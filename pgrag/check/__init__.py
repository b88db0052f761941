"""Checked answers (``pgrag ask --check``): is each sentence of an answer supported by the
``[Source N]`` it cites?

The answer is cut into sentences (:mod:`pgrag.check.sentences`); every sentence that is not
exempt must cite a source of the context, and the sources it cites must support it, as judged by
one of two checkers:

* ``llm`` (:mod:`pgrag.check.judge`): the OpenAI-compatible chat endpoint judges the whole
  answer and replies ``{"faithful": bool, "unsupported_claims": [str], "confidence": 0..1}``;
  its tokens count as the tenant's ``chat`` usage, as the answer's do.
* ``local`` (:mod:`pgrag.check.local`): the bundled embedding model (or a cross-encoder) on
  this machine, with nothing sent anywhere; its tokens count as ``query`` usage.

The result (:class:`CheckResult`) holds a verdict per sentence and an overall confidence
(:mod:`pgrag.check.verdicts`); below ``min_confidence`` the answer is withheld.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pgrag.check.judge import Judgement, ask_judge, judge_messages, llm_verdicts, parse_judgement
from pgrag.check.local import (
    DEFAULT_MIN_SUPPORT,
    LocalChecker,
    SentenceEmbedder,
    SupportScorer,
    local_verdicts,
)
from pgrag.check.sentences import AnswerSentence, answer_sentences, context_sources
from pgrag.check.verdicts import CheckResult, SentenceVerdict, supported_share
from pgrag.errors import ConfigError
from pgrag.usage import Usage

if TYPE_CHECKING:
    from pgrag.answer import ChatConfig

Checker = Literal["llm", "local"]
CHECKERS: tuple[Checker, ...] = ("llm", "local")
DEFAULT_MIN_CONFIDENCE = 0.8
"""Below this overall confidence an answer is withheld: with the local checker, one sentence in
five may be unsupported; with the LLM checker, a judge at least 0.8 sure of a faithful answer."""

__all__ = [
    "CHECKERS",
    "DEFAULT_MIN_CONFIDENCE",
    "DEFAULT_MIN_SUPPORT",
    "CheckOptions",
    "CheckResult",
    "Checker",
    "SentenceVerdict",
    "SupportScorer",
    "check_answer",
    "check_for_tenant",
]

Record = Callable[[Usage], object]


@dataclass(frozen=True)
class CheckOptions:
    """How to check: the checker, the thresholds, the judge's model (default: the chat
    model that answered)."""

    checker: Checker = "llm"
    min_confidence: float = DEFAULT_MIN_CONFIDENCE
    min_support: float = DEFAULT_MIN_SUPPORT
    judge_model: str | None = None

    def validate(self) -> None:
        if not 0 <= self.min_confidence <= 1:
            raise ConfigError("--min-confidence takes a number from 0 to 1.")
        if self.checker not in CHECKERS:
            raise ConfigError(f"--check takes one of {', '.join(CHECKERS)}.")


def confidence(judgement: Judgement | None, verdicts: list[SentenceVerdict]) -> float:
    """The overall confidence (:mod:`pgrag.check.verdicts`)."""
    share = supported_share(verdicts)
    if judgement is None:
        return 1.0 if share is None else share
    if not judgement.faithful or judgement.unsupported_claims:
        return 0.0
    return judgement.confidence * (1.0 if share is None else share)


def _llm_check(
    question: str,
    context: str,
    sentences: list[AnswerSentence],
    available: int,
    options: CheckOptions,
    chat: ChatConfig | None,
    record: Record,
) -> CheckResult:
    if chat is None:
        raise ConfigError(
            "--check llm needs a chat endpoint (OPENAI_API_KEY and/or OPENAI_BASE_URL): "
            "configure one, or use --check local."
        )
    judge = dataclasses.replace(chat, model=options.judge_model or chat.model)
    reply = ask_judge(judge_messages(question, context, sentences), judge)
    record(Usage("chat", "openai", judge.model, reply.input_tokens, reply.output_tokens))
    judgement = parse_judgement(reply.text, f"{judge.endpoint} (model {judge.model})")
    verdicts = llm_verdicts(judgement, sentences, available)
    return CheckResult(
        "llm",
        judge.model,
        verdicts,
        confidence(judgement, verdicts),
        options.min_confidence,
        judgement.faithful and not judgement.unsupported_claims,
        judgement.unsupported_claims,
    )


def _local_check(
    sentences: list[AnswerSentence],
    texts: dict[int, str],
    options: CheckOptions,
    embedder: SentenceEmbedder | None,
    scorer: SupportScorer | None,
    record: Record,
) -> CheckResult:
    if embedder is None:
        from pgrag.pipeline.embedders import LocalEmbedder

        embedder = LocalEmbedder()
    checker = LocalChecker(embedder, options.min_support, scorer)
    before = embedder.tokens_used
    verdicts = local_verdicts(checker, sentences, texts)
    if embedder.tokens_used > before:
        record(Usage("query", "local", embedder.model_name, embedder.tokens_used - before))
    return CheckResult(
        "local", checker.model, verdicts, confidence(None, verdicts), options.min_confidence
    )


def check_answer(
    question: str,
    answer: str,
    context: str,
    options: CheckOptions,
    *,
    chat: ChatConfig | None = None,
    embedder: SentenceEmbedder | None = None,
    scorer: SupportScorer | None = None,
    record: Record = lambda usage: None,
) -> CheckResult:
    """Check ``answer`` to ``question`` against ``context`` (a ``build_context`` block).

    ``chat``: the endpoint of the LLM checker. ``embedder`` (default: the bundled model) and
    ``scorer`` (a cross-encoder, used instead of cosine similarity): the local checker's.
    ``record`` is called with the usage of each model call, as soon as it returns."""
    options.validate()
    sentences = answer_sentences(answer)
    texts = context_sources(context)
    if options.checker == "llm":
        return _llm_check(question, context, sentences, len(texts), options, chat, record)
    return _local_check(sentences, texts, options, embedder, scorer, record)


def check_for_tenant(
    question: str,
    answer: str,
    context: str,
    options: CheckOptions,
    *,
    tenant: str,
    dsn: str,
    chat: ChatConfig | None = None,
    embedder: SentenceEmbedder | None = None,
    scorer: SupportScorer | None = None,
) -> CheckResult:
    """:func:`check_answer` as ``pgrag ask --check`` runs it: the models' tokens recorded as
    ``tenant``'s usage on ``dsn`` (a failure to record them is a warning, as for the answer)."""
    from pgrag.usage import record_usage_quietly

    def record(usage: Usage) -> None:
        record_usage_quietly(dsn, tenant, usage)

    return check_answer(
        question,
        answer,
        context,
        options,
        chat=chat,
        embedder=embedder,
        scorer=scorer,
        record=record,
    )
