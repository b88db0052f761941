"""The ``--rerank`` specification and the re-ranker it names.

``local:MODEL`` is a local cross-encoder (a folder, or a model name already in the Hugging Face
cache); ``http://...`` or ``https://...`` an HTTP re-rank API. The environment completes it:
``PGRAG_RERANK`` (the specification when no option gives one), ``PGRAG_RERANK_API_KEY`` (the
API's key), ``PGRAG_RERANK_MODEL`` (the model the API should use), ``PGRAG_RERANK_TIMEOUT``
(seconds per call, default 30), ``PGRAG_RERANK_BATCH`` (pairs per batch of a local model,
default 32) and ``PGRAG_RERANK_THREADS`` (a local model's CPU threads).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pgrag.errors import ConfigError
from pgrag.rerank.base import DEFAULT_RERANK_TOP, MAX_RERANK_TOP, Reranker

SPEC_HELP = "local:MODEL (a cross-encoder folder or cached model name) or an http(s):// URL"


@dataclass(frozen=True)
class RerankSettings:
    """A re-ranker and how many candidates it re-orders per query."""

    reranker: Reranker
    top: int = DEFAULT_RERANK_TOP

    def __post_init__(self) -> None:
        check_top(self.top)


def check_top(top: int) -> int:
    if not 1 <= top <= MAX_RERANK_TOP:
        raise ConfigError(f"--rerank-top must be between 1 and {MAX_RERANK_TOP} (got {top}).")
    return top


def _number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{name}={raw!r} must be a positive number.")
    return value


def reranker_from_spec(spec: str) -> Reranker:
    """The re-ranker ``spec`` names (see the module docstring); ConfigError when it names none."""
    spec = spec.strip()
    if spec.startswith("local:"):
        from pgrag.rerank.local import CrossEncoderReranker

        return CrossEncoderReranker(
            spec.removeprefix("local:"), batch_size=int(_number("PGRAG_RERANK_BATCH", 32))
        )
    if spec.lower().startswith(("http://", "https://")):
        from pgrag.rerank.http import HttpReranker

        return HttpReranker(
            spec,
            model=os.environ.get("PGRAG_RERANK_MODEL"),
            api_key=os.environ.get("PGRAG_RERANK_API_KEY"),
            timeout=_number("PGRAG_RERANK_TIMEOUT", 30.0),
        )
    raise ConfigError(f"--rerank {spec!r} names no re-ranker: use {SPEC_HELP}.")
