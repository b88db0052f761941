"""The judge prompts of the golden-set answer metrics, and the strict checks of their replies.

Every metric is one request to the OpenAI-compatible chat endpoint (JSON mode when it accepts
it, as ``pgrag ask --check llm``: :func:`pgrag.check.judge.ask_judge`), with the prompt below as
the system message. The reply must be one JSON object (a Markdown code fence around it is
accepted) holding exactly the keys asked for, of the types asked for; other keys are ignored.
Anything else raises :class:`JudgeReplyInvalid`, which fails that question's answer metrics
alone. The scores follow RAGAS:

* faithfulness: the answer's claims the sources support, over its claims
  (:data:`FAITHFULNESS_PROMPT`);
* answer relevance: the judge writes the questions the answer answers and says whether it is
  noncommittal (:data:`ANSWER_RELEVANCE_PROMPT`); the score is 0 for a noncommittal answer,
  else the mean cosine similarity of those questions to the asked one, embedded by the
  tenant's query model;
* context precision: the judge marks each source useful or not for the reference answer (the
  generated answer when there is none) (:data:`CONTEXT_PRECISION_PROMPT`); the score is the
  mean of precision@k over the ranks k of the useful sources;
* context recall: the reference answer's claims the sources support, over its claims
  (:data:`CONTEXT_RECALL_PROMPT`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgrag.check.judge import ReplyShapeError, reply_object
from pgrag.errors import CheckFailed
from pgrag.openai_errors import one_line

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

CLAIMS_REPLY = (
    'Reply with one JSON object and nothing else, with exactly one key: "claims", a list with '
    'one object per claim, {"claim": the claim as one short sentence, "supported": true or '
    "false}; an empty list when there is no factual claim."
)
FAITHFULNESS_PROMPT = (
    "You judge whether an answer is faithful to the numbered sources it was written from. "
    "Split the answer into its factual claims: short standalone statements of one fact each "
    "(leave out [Source N] labels, and statements that the sources lack the information). "
    "A claim is supported only when the sources state it or directly imply it; outside "
    "knowledge does not count. " + CLAIMS_REPLY
)
ANSWER_RELEVANCE_PROMPT = (
    "You read an answer and write the questions it answers. Write 3 different questions, each "
    "one that the answer answers fully, phrased as a user would ask it. Also decide whether "
    "the answer is noncommittal: evasive or vague, or saying that it does not know or that "
    "the sources do not contain the information. Reply with one JSON object and nothing "
    'else, with exactly these keys: "questions", a list of 3 strings; "noncommittal", true '
    "or false."
)
CONTEXT_PRECISION_PROMPT = (
    "You judge which retrieved sources were useful to answer a question. For each numbered "
    "source, decide whether it is useful to arrive at the given answer: it states a fact "
    "the answer relies on. Reply with one JSON object and nothing else, with exactly one "
    'key: "useful", a list of true or false, one per source in their order ([Source 1] '
    "first), with exactly as many items as there are sources."
)
CONTEXT_RECALL_PROMPT = (
    "You check how much of a reference answer the numbered sources cover. Split the "
    "reference answer into its factual claims: short standalone statements of one fact each. "
    "A claim is supported only when the sources state it or directly imply it; outside "
    "knowledge does not count. " + CLAIMS_REPLY
)
PROMPTS = {
    "faithfulness": FAITHFULNESS_PROMPT,
    "answer_relevance": ANSWER_RELEVANCE_PROMPT,
    "context_precision": CONTEXT_PRECISION_PROMPT,
    "context_recall": CONTEXT_RECALL_PROMPT,
}
MAX_CLAIMS = 200
MAX_QUESTIONS = 10


class JudgeReplyInvalid(CheckFailed):
    """A judge's reply is not the JSON object its prompt asks for."""


@dataclass(frozen=True)
class Claim:
    claim: str
    supported: bool


@dataclass(frozen=True)
class Relevance:
    questions: list[str]
    noncommittal: bool


def _messages(prompt: str, user: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "system", "content": prompt}, {"role": "user", "content": user}]


def faithfulness_messages(
    question: str, context: str, answer: str
) -> list[ChatCompletionMessageParam]:
    return _messages(
        FAITHFULNESS_PROMPT, f"Sources:\n\n{context}\n\nQuestion: {question}\n\nAnswer:\n{answer}"
    )


def relevance_messages(answer: str) -> list[ChatCompletionMessageParam]:
    return _messages(ANSWER_RELEVANCE_PROMPT, f"Answer:\n{answer}")


def precision_messages(
    question: str, context: str, answer: str, sources: int
) -> list[ChatCompletionMessageParam]:
    return _messages(
        CONTEXT_PRECISION_PROMPT,
        f"Sources ({sources}):\n\n{context}\n\nQuestion: {question}\n\nAnswer:\n{answer}",
    )


def recall_messages(
    question: str, context: str, reference: str
) -> list[ChatCompletionMessageParam]:
    return _messages(
        CONTEXT_RECALL_PROMPT,
        f"Sources:\n\n{context}\n\nQuestion: {question}\n\nReference answer:\n{reference}",
    )


def _object(reply: str, metric: str, keys: Sequence[str]) -> dict[str, Any]:
    """The reply's JSON object holding ``keys`` (:func:`reply_object`), else
    :class:`JudgeReplyInvalid`."""
    try:
        return reply_object(reply, keys)
    except ReplyShapeError as exc:
        raise JudgeReplyInvalid(f"the {metric} judge {exc}") from None


def invalid(metric: str, what: str) -> JudgeReplyInvalid:
    return JudgeReplyInvalid(f"the {metric} judge replied with {what}")


def parse_claims(reply: str, metric: str) -> list[Claim]:
    """``{"claims": [{"claim": str, "supported": bool}, ...]}``."""
    claims = _object(reply, metric, ("claims",))["claims"]
    if not isinstance(claims, list) or len(claims) > MAX_CLAIMS:
        raise invalid(metric, f"claims that are not a list of at most {MAX_CLAIMS} objects")
    out = []
    for item in claims:
        ok = (
            isinstance(item, dict)
            and isinstance(item.get("claim"), str)
            and isinstance(item.get("supported"), bool)
        )
        if not ok:
            raise invalid(
                metric,
                f"a claim that is not {{claim: string, supported: bool}}: "
                f"{one_line(json.dumps(item))[:80]}",
            )
        out.append(Claim(item["claim"].strip(), item["supported"]))
    return out


def parse_relevance(reply: str) -> Relevance:
    """``{"questions": [str, ...], "noncommittal": bool}`` (1 to 10 questions)."""
    data = _object(reply, "answer_relevance", ("questions", "noncommittal"))
    questions, noncommittal = data["questions"], data["noncommittal"]
    if not isinstance(noncommittal, bool):
        raise invalid("answer_relevance", f"noncommittal {noncommittal!r}, not true or false")
    ok = isinstance(questions, list) and all(isinstance(q, str) and q.strip() for q in questions)
    if not ok or not 1 <= len(questions) <= MAX_QUESTIONS:
        raise invalid("answer_relevance", "questions that are not a list of 1 to 10 strings")
    return Relevance([q.strip() for q in questions], noncommittal)


def parse_useful(reply: str, sources: int) -> list[bool]:
    """``{"useful": [bool, ...]}`` with one item per source."""
    useful = _object(reply, "context_precision", ("useful",))["useful"]
    if not isinstance(useful, list) or not all(isinstance(u, bool) for u in useful):
        raise invalid("context_precision", "useful that is not a list of true or false")
    if len(useful) != sources:
        raise invalid("context_precision", f"{len(useful)} useful verdicts for {sources} sources")
    return list(useful)


def claims_score(claims: Sequence[Claim]) -> float | None:
    """The share of supported claims; None when there is no claim."""
    return sum(c.supported for c in claims) / len(claims) if claims else None


def average_precision(useful: Sequence[bool]) -> float:
    """RAGAS context precision: the mean of precision@k over the ranks k of useful sources
    (0 when none is useful)."""
    hits, total = 0, 0.0
    for k, verdict in enumerate(useful, 1):
        if verdict:
            hits += 1
            total += hits / k
    return total / hits if hits else 0.0
