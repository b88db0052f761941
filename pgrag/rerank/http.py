"""An HTTP re-rank API in the common shape (Cohere, Jina, Voyage, Hugging Face TEI).

Request: ``POST URL`` with ``{"model", "query", "documents", "top_n"}`` (``model`` only when
one is configured; ``top_n`` is the number of documents, so every document gets a score) and,
with a key, ``Authorization: Bearer KEY``. Reply: ``{"results": [{"index", "relevance_score"}]}``
(Cohere, Jina), ``{"data": [...]}`` (Voyage) or a bare list of ``{"index", "score"}`` (TEI's
``/rerank``). Every document must come back once, with a finite score.

Each call times out after ``timeout`` seconds; refused connections, timeouts, 429 and 5xx
are retried ``retries`` times with exponential backoff, waiting what a ``Retry-After`` header
asks (capped at ``max_wait``). Every failure is one :class:`~pgrag.errors.RerankError` line
saying what to do. Only the standard library is used.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from pgrag.errors import ConfigError, RerankError

DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 3
MAX_WAIT = 60.0
# Hosted APIs that refuse a call without a key: the missing key is reported before calling.
KEYED_HOSTS = ("api.cohere.com", "api.cohere.ai", "api.jina.ai", "api.voyageai.com")
RETRYABLE_STATUSES = (429, 500, 502, 503, 504)


class HttpReranker:
    """Scores documents with a re-rank API at ``url``."""

    def __init__(
        self,
        url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff: float = 0.5,
        max_wait: float = MAX_WAIT,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"re-rank URL {url!r} is not an http:// or https:// URL.")
        if timeout <= 0 or retries < 0:
            raise ConfigError("the re-rank timeout must be positive and retries 0 or more.")
        self.url = url
        self.name = url
        self.model = model or None
        self.api_key = api_key or None
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_wait = max_wait
        self._sleep = sleep
        if self.api_key is None and parts.hostname.lower() in KEYED_HOSTS:
            raise RerankError(
                f"the re-rank API at {parts.hostname} needs a key: set PGRAG_RERANK_API_KEY."
            )

    def score(self, query: str, documents: Sequence[str]) -> list[float]:
        if not documents:
            return []
        body: dict[str, Any] = {
            "query": query,
            "documents": list(documents),
            "top_n": len(documents),
        }
        if self.model:
            body["model"] = self.model
        return parse_reply(self.url, self._post(body), len(documents))

    def _request(self, body: dict[str, Any]) -> urllib.request.Request:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode()
        return urllib.request.Request(self.url, data=data, headers=headers, method="POST")

    def _post(self, body: dict[str, Any]) -> Any:
        attempt = 0
        while True:
            attempt += 1
            wait: float | None = None
            try:
                with urllib.request.urlopen(self._request(body), timeout=self.timeout) as reply:
                    raw = reply.read()
            except urllib.error.HTTPError as exc:
                if exc.code not in RETRYABLE_STATUSES or attempt > self.retries:
                    raise self._http_error(exc) from exc
                wait = retry_after(exc.headers.get("Retry-After"))
            except TimeoutError as exc:
                if attempt > self.retries:
                    raise self._timeout(attempt) from exc
            except urllib.error.URLError as exc:
                if isinstance(exc.reason, TimeoutError):
                    if attempt > self.retries:
                        raise self._timeout(attempt) from exc
                elif attempt > self.retries or not isinstance(exc.reason, ConnectionError):
                    raise RerankError(
                        f"cannot reach the re-rank API at {self.url} ({exc.reason}): "
                        "check the URL and that the server is running."
                    ) from exc
            except OSError as exc:  # a connection reset while reading the reply
                if attempt > self.retries:
                    raise RerankError(
                        f"the re-rank API at {self.url} failed ({exc}): check the server."
                    ) from exc
            else:
                try:
                    return json.loads(raw)
                except ValueError as exc:
                    raise RerankError(
                        f"the re-rank API at {self.url} answered something that is not JSON: "
                        "check that the URL is a re-rank endpoint (e.g. .../v1/rerank)."
                    ) from exc
            if wait is None:
                wait = self.backoff * 2 ** (attempt - 1)
            self._sleep(min(wait, self.max_wait))

    def _timeout(self, attempts: int) -> RerankError:
        return RerankError(
            f"the re-rank API at {self.url} did not answer within {self.timeout:g} s "
            f"({attempts} attempts): check the server, or raise PGRAG_RERANK_TIMEOUT."
        )

    def _http_error(self, exc: urllib.error.HTTPError) -> RerankError:
        status = exc.code
        if status in (401, 403):
            if self.api_key is None:
                return RerankError(
                    f"the re-rank API at {self.url} needs a key (HTTP {status}): "
                    "set PGRAG_RERANK_API_KEY."
                )
            return RerankError(
                f"the re-rank API at {self.url} refused the key (HTTP {status}): "
                "check PGRAG_RERANK_API_KEY."
            )
        detail = _error_detail(exc)
        hint = (
            "wait and try again, or lower --rerank-top"
            if status in RETRYABLE_STATUSES
            else "check the URL, PGRAG_RERANK_MODEL and the request limits of the API"
        )
        return RerankError(f"the re-rank API at {self.url} answered HTTP {status}{detail}: {hint}.")


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        text = exc.read(300).decode("utf-8", "replace")
    except OSError:
        return ""
    text = " ".join(text.split())
    return f" ({text[:200]})" if text else ""


def retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def parse_reply(url: str, reply: Any, count: int) -> list[float]:
    """One score per document from a re-rank reply (see the module docstring for shapes)."""

    def malformed(what: str) -> RerankError:
        return RerankError(
            f"the re-rank API at {url} answered {what}: it must return results with an index "
            "and a relevance_score per document."
        )

    items = reply
    if isinstance(reply, dict):
        items = reply.get("results", reply.get("data"))
    if not isinstance(items, list):
        raise malformed("no list of results")
    scores: list[float | None] = [None] * count
    for item in items:
        if not isinstance(item, dict):
            raise malformed("a result that is not an object")
        index = item.get("index")
        score = item.get("relevance_score", item.get("score"))
        if isinstance(index, bool) or not isinstance(index, int):
            raise malformed("a result without an integer index")
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise malformed("a result without a numeric relevance_score")
        if not 0 <= index < count:
            raise malformed(f"index {index} for {count} documents")
        if scores[index] is not None:
            raise malformed(f"index {index} twice")
        if not math.isfinite(float(score)):
            raise malformed("a score that is not a finite number")
        scores[index] = float(score)
    missing = sum(s is None for s in scores)
    if missing:
        raise malformed(f"{len(items)} results for {count} documents")
    return [s for s in scores if s is not None]
