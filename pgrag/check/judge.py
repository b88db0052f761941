"""The LLM checker: the chat endpoint judges the answer against its sources.

One request per answer, with :data:`JUDGE_PROMPT` and the sources, the question and the answer's
sentences, asking for the JSON object ``{"faithful": bool, "unsupported_claims": [str],
"confidence": 0..1}`` (the client's JSON mode, ``response_format={"type": "json_object"}``;
an endpoint that refuses it with HTTP 400 is asked again without it). The reply is validated
strictly (:func:`parse_judgement`): anything else is a one-line :class:`CheckFailed`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgrag.check.sentences import AnswerSentence
from pgrag.check.verdicts import SentenceVerdict, citation_problem
from pgrag.errors import CheckFailed
from pgrag.openai_errors import one_line

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

    from pgrag.answer import Answer, ChatConfig

JUDGE_PROMPT = (
    "You check whether an answer is faithful to the numbered sources it was written from. "
    "A claim is supported only when the sources it cites state it or directly imply it; "
    "outside knowledge does not count, and a claim citing the wrong source is unsupported. "
    "Reply with one JSON object and nothing else, with exactly these keys: "
    '"faithful": true when every claim of the answer is supported, else false; '
    '"unsupported_claims": a list of the answer\'s sentences that are not supported, '
    "each copied exactly as numbered below (an empty list when faithful is true); "
    '"confidence": a number from 0 to 1, how sure you are that the whole answer is '
    "supported by its sources."
)
KEYS = ("faithful", "unsupported_claims", "confidence")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL | re.IGNORECASE)
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Judgement:
    """The judge's reply, validated."""

    faithful: bool
    unsupported_claims: list[str]
    confidence: float


def judge_messages(
    question: str, context: str, sentences: list[AnswerSentence]
) -> list[ChatCompletionMessageParam]:
    """The messages sent to the judge: the prompt, then sources, question and numbered answer."""
    numbered = "\n".join(f"{i}. {s.text}" for i, s in enumerate(sentences, 1))
    return [
        {"role": "system", "content": JUDGE_PROMPT},
        {
            "role": "user",
            "content": f"Sources:\n\n{context}\n\nQuestion: {question}\n\n"
            f"Answer, one sentence per line:\n{numbered}",
        },
    ]


def _invalid(where: str, what: str) -> CheckFailed:
    return CheckFailed(
        f"the answer check's judge {where} {what}: use a model that follows JSON instructions "
        "(--check-model), or --check local."
    )


class ReplyShapeError(ValueError):
    """What a judge's reply is instead of the JSON object asked for, in words for a message."""


def reply_object(reply: str, keys: Sequence[str]) -> dict[str, Any]:
    """The JSON object of a judge's reply (inside a Markdown code fence too) holding ``keys``,
    else :class:`ReplyShapeError` saying what the reply is instead. Shared by every judge
    (``ask --check llm`` and ``eval --golden``)."""
    text = reply.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    try:
        data: Any = json.loads(text)
    except ValueError:
        raise ReplyShapeError(f"replied with no JSON object ({one_line(reply)[:80]!r})") from None
    if not isinstance(data, dict):
        raise ReplyShapeError(f"replied with JSON {type(data).__name__}, not an object")
    missing = [key for key in keys if key not in data]
    if missing:
        raise ReplyShapeError(f"left out {', '.join(missing)} from its reply")
    return data


def parse_judgement(reply: str, where: str) -> Judgement:
    """The judge's reply as a :class:`Judgement`, else :class:`CheckFailed` saying what is
    wrong. Accepted: one JSON object (inside a Markdown code fence too) with ``faithful`` a
    boolean, ``unsupported_claims`` a list of strings and ``confidence`` a number from 0 to 1;
    other keys are ignored."""
    try:
        data = reply_object(reply, KEYS)
    except ReplyShapeError as exc:
        raise _invalid(where, str(exc)) from None
    faithful, claims, confidence = (data[key] for key in KEYS)
    if not isinstance(faithful, bool):
        raise _invalid(where, f"gave faithful {faithful!r}, not true or false")
    if not isinstance(claims, list) or not all(isinstance(c, str) for c in claims):
        raise _invalid(where, "gave unsupported_claims that is not a list of strings")
    number = isinstance(confidence, int | float) and not isinstance(confidence, bool)
    if not number or not math.isfinite(confidence) or not 0 <= confidence <= 1:
        raise _invalid(where, f"gave confidence {confidence!r}, not a number from 0 to 1")
    return Judgement(faithful, [c.strip() for c in claims if c.strip()], float(confidence))


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def flagged_sentence(claim: str, sentences: list[AnswerSentence]) -> int | None:
    """The index of the sentence an unsupported claim quotes: the one sharing most of the
    claim's words (at least half of them), or None."""
    words = _words(claim) - {"source"}
    if not words:
        return None
    overlaps = [len(words & _words(s.text)) / len(words) for s in sentences]
    best = max(range(len(sentences)), key=lambda i: overlaps[i], default=None)
    return best if best is not None and overlaps[best] >= 0.5 else None


def llm_verdicts(
    judgement: Judgement, sentences: list[AnswerSentence], available: int
) -> list[SentenceVerdict]:
    """A verdict per sentence: exempt, uncited (or citing a source the context lacks), flagged
    by the judge as an unsupported claim, or supported."""
    flagged: dict[int, str] = {}
    for claim in judgement.unsupported_claims:
        index = flagged_sentence(claim, sentences)
        if index is not None:
            flagged.setdefault(index, claim)
    verdicts = []
    for i, s in enumerate(sentences):
        problem = citation_problem(s.sources, available)
        if s.exempt:
            verdicts.append(SentenceVerdict(s.text, s.sources, True, None, "exempt", True))
        elif problem is not None:
            verdicts.append(SentenceVerdict(s.text, s.sources, False, None, problem))
        elif i in flagged:
            reason = one_line(f"the judge found it unsupported: {flagged[i]!r}")
            verdicts.append(SentenceVerdict(s.text, s.sources, False, None, reason))
        else:
            verdicts.append(SentenceVerdict(s.text, s.sources, True, None, "not flagged"))
    return verdicts


def ask_judge(messages: list[ChatCompletionMessageParam], config: ChatConfig) -> Answer:
    """The judge's reply and its tokens, in JSON mode when the endpoint accepts it."""
    import openai

    from pgrag.answer import ChatError, complete

    try:
        return complete(messages, config, response_format={"type": "json_object"})
    except ChatError as exc:
        if not isinstance(exc.__cause__, openai.BadRequestError):
            raise
    return complete(messages, config)
