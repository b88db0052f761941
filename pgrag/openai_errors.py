"""One-line, actionable messages for failures of an OpenAI-compatible endpoint."""

from __future__ import annotations

from typing import Any


def one_line(text: str) -> str:
    """``text`` folded onto one line and shortened, for an error message."""
    folded = " ".join(str(text).split())
    return folded if len(folded) <= 200 else folded[:197] + "..."


def describe_openai_error(exc: Any, *, what: str, retries: int, timeout: float) -> str:
    """Say what an ``openai.APIError`` means and what to do, e.g. for ``what`` =
    ``"the chat endpoint http://host/v1 (model m)"``. ``retries`` and ``timeout`` are the
    client's settings, already spent when this is called."""
    import openai

    if isinstance(exc, openai.AuthenticationError):
        return f"{what} refused the API key (HTTP {exc.status_code}): check OPENAI_API_KEY."
    if isinstance(exc, openai.PermissionDeniedError):
        return (
            f"{what} denied access (HTTP {exc.status_code}): check that the key may use this model."
        )
    if isinstance(exc, openai.NotFoundError):
        return f"{what} answered 404: check OPENAI_BASE_URL and the model name."
    if isinstance(exc, openai.RateLimitError):
        return f"{what} is still rate-limiting after {retries} retries (HTTP 429): try again later."
    if isinstance(exc, openai.APIStatusError):
        return (
            f"{what} failed with HTTP {exc.status_code} after {retries} retries: "
            f"{one_line(exc.message)}"
        )
    if isinstance(exc, openai.APITimeoutError):
        return f"{what} timed out ({timeout:g} s) after {retries} retries."
    return (
        f"cannot reach {what} after {retries} retries ({one_line(str(exc))}): "
        "check OPENAI_BASE_URL and the network."
    )
