"""The optional answer step: a grounded prompt to any OpenAI-compatible chat endpoint.

Retrieval and the context block come from SQL (``build_context``); this module only sends that
block with the question and returns the model's text. Retries (429, 5xx, timeouts, honouring
``Retry-After``) and timeouts are the ``openai`` client's own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pgrag import tracing
from pgrag.errors import PgragError
from pgrag.openai_errors import describe_openai_error

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

DEFAULT_CHAT_MODEL = "gpt-4o-mini"

SYSTEM_PROMPT = (
    "You answer questions using only the numbered sources you are given. "
    "Cite every statement with the label of the source it comes from, like [Source 1] or "
    "[Source 2][Source 3]. If the sources do not contain the answer, say that the sources do "
    "not contain enough information to answer, and do not guess or use outside knowledge."
)


class ChatError(PgragError):
    """The chat endpoint failed or refused the request."""


@dataclass(frozen=True)
class ChatConfig:
    """Where and how to ask for an answer."""

    model: str = DEFAULT_CHAT_MODEL
    base_url: str | None = None
    api_key: str | None = None
    timeout: float = 60.0
    max_retries: int = 3

    @classmethod
    def from_env(cls, model: str | None = None, **kwargs: Any) -> ChatConfig | None:
        """The endpoint configured by OPENAI_API_KEY and/or OPENAI_BASE_URL; None without one.

        The model is ``model``, else PGRAG_CHAT_MODEL, else gpt-4o-mini.
        """
        api_key = os.environ.get("OPENAI_API_KEY") or None
        base_url = os.environ.get("OPENAI_BASE_URL") or None
        if api_key is None and base_url is None:
            return None
        return cls(
            model=model or os.environ.get("PGRAG_CHAT_MODEL") or DEFAULT_CHAT_MODEL,
            base_url=base_url,
            api_key=api_key,
            **kwargs,
        )

    @property
    def endpoint(self) -> str:
        return self.base_url or "https://api.openai.com/v1"


def grounded_messages(question: str, context: str) -> list[ChatCompletionMessageParam]:
    """The chat messages: instructions, then the sources and the question."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"Sources:\n\n{context}\n\nQuestion: {question}"},
    ]


@dataclass(frozen=True)
class Answer:
    """The chat model's answer and the tokens the endpoint reported for it (0 when it did not)."""

    text: str
    input_tokens: int = 0
    output_tokens: int = 0


def answer(question: str, context: str, config: ChatConfig) -> str:
    """Ask the chat endpoint to answer ``question`` from ``context`` only; return its text."""
    return answer_with_usage(question, context, config).text


def answer_with_usage(question: str, context: str, config: ChatConfig) -> Answer:
    """:func:`answer`, with the prompt and completion tokens of the response's usage."""
    return complete(grounded_messages(question, context), config)


def complete(
    messages: list[ChatCompletionMessageParam], config: ChatConfig, **options: Any
) -> Answer:
    """The chat endpoint's reply to ``messages`` (temperature 0; ``options`` passed on, e.g.
    ``response_format``) and its tokens; a failure is a one-line :class:`ChatError` caused by
    the client's error."""
    import openai

    client = openai.OpenAI(
        # A local endpoint often needs no key, but the client insists on one.
        api_key=config.api_key or "not-needed",
        base_url=config.base_url,
        timeout=config.timeout,
        max_retries=config.max_retries,
    )
    where = f"{config.endpoint} (model {config.model})"
    with tracing.span("chat", chat_attributes(config)):
        reply = _reply(client, messages, config, where, options)
        tracing.annotate(
            {
                "gen_ai.usage.input_tokens": reply.input_tokens,
                "gen_ai.usage.output_tokens": reply.output_tokens,
            }
        )
        tracing.annotate_text("gen_ai.completion", reply.text)
        return reply


def chat_attributes(config: ChatConfig) -> dict[str, Any]:
    """The ``chat`` span's attributes (OpenTelemetry's GenAI conventions)."""
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": config.model,
        "server.address": urlsplit(config.endpoint).hostname,
    }


def _reply(
    client: Any,
    messages: list[ChatCompletionMessageParam],
    config: ChatConfig,
    where: str,
    options: dict[str, Any],
) -> Answer:
    """One chat completion as an :class:`Answer`; a failure a one-line :class:`ChatError`."""
    import openai

    try:
        response = client.chat.completions.create(
            model=config.model, messages=messages, temperature=0, **options
        )
    except openai.APIError as exc:
        raise ChatError(
            describe_openai_error(
                exc,
                what=f"the chat endpoint {where}",
                retries=config.max_retries,
                timeout=config.timeout,
            )
        ) from exc
    choices = response.choices or []
    text = (choices[0].message.content or "").strip() if choices else ""
    if not text:
        raise ChatError(f"the chat endpoint {where} returned an empty answer.")
    usage = getattr(response, "usage", None)
    prompt = getattr(usage, "prompt_tokens", None)
    completion = getattr(usage, "completion_tokens", None)
    return Answer(
        text,
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
    )


def answer_for_tenant(
    question: str, context: str, config: ChatConfig, *, tenant: str, dsn: str
) -> str:
    """The answer step of ``pgrag ask``: :func:`answer_with_usage`, its tokens recorded as
    ``tenant``'s ``chat`` usage on the database ``dsn`` names (a failure to record them is a
    warning, never a failed answer: :func:`pgrag.usage.record_usage_quietly`); the answer."""
    from pgrag.usage import Usage, record_usage_quietly

    reply = answer_with_usage(question, context, config)
    record_usage_quietly(
        dsn, tenant, Usage("chat", "openai", config.model, reply.input_tokens, reply.output_tokens)
    )
    return reply.text
